-- bucket.lua: the exact continuous bucket shared by token_bucket and the leaky_bucket meter
-- (algorithms.TokenBucket and algorithms.LeakyBucket with MaxDelay == 0). The two are one
-- machine seen from opposite sides: the token bucket stores tokens, the meter stores its
-- level = capU - tokens. The arithmetic follows the TokenBucket doc comment line by line.
--
-- KEYS[1]  the key
-- ARGV     n, limit, capacity (Burst, or Limit when 0), lg, wg [, now_s, now_ns]
--          where g = gcd(Limit, Window in ns), lg = Limit/g, wg = Window/g; amounts are in
--          units of 1/wg token, so one nanosecond refills exactly lg units.
-- state    hash {v = version, <field> = tokens or level (units), l = last (Unix ns)}
local function bucket(ver, field, as_level)
  local key = KEYS[1]
  local err, n, now_s, now_n, limit, cap, lg, wg = script_args(4)
  if err then
    return bad_args(err)
  end
  local capU = cap * wg

  -- fresh: tokens = capU, last = now (so eff = now)
  local tokens, eff_s, eff_n = capU, now_s, now_n
  local st = load_hash(key, ver, field, 'l')
  if st then
    local v = int(st[1])
    local ls, ln = ts(st[2])
    if v ~= nil and ls ~= nil and not tsless(MAX_S, MAX_N, ls, ln) then
      v = math.min(math.max(v, 0), capU)
      if as_level then
        v = capU - v
      end
      tokens = v
      -- eff = max(now, last): a stale call is evaluated at last.
      if tsless(now_s, now_n, ls, ln) then
        eff_s, eff_n = ls, ln
      end
      local deficit = capU - tokens
      if deficit > 0 then
        -- elapsed may be huge after a long idle period; it is only compared with fill.
        local elapsed = tsdiff(eff_s, eff_n, ls, ln)
        if elapsed >= ceildiv(deficit, lg) then
          tokens = capU
        else
          tokens = tokens + elapsed * lg
        end
      end
    end
  end

  local skew = tsdiff(eff_s, eff_n, now_s, now_n)
  local allowed, retry = false, 0
  if n <= 0 or n > cap then
    -- unsatisfiable: RetryAfter 0, nothing stored
  elseif tokens >= n * wg then
    tokens = tokens - n * wg
    allowed = true
  else
    retry = skew + ceildiv(n * wg - tokens, lg)
  end
  local reset = skew + ceildiv(capU - tokens, lg)
  -- Only an admission changes the state; a denial is not written (see scripts.go).
  if allowed then
    local stored = tokens
    if as_level then
      stored = capU - tokens
    end
    redis.call('HSET', key, 'v', ver, field, string.format('%d', stored), 'l', tsfmt(eff_s, eff_n))
    expire(key, reset)
  end
  return reply(allowed, limit, math.floor(tokens / wg), retry, reset, now_s, now_n)
end
