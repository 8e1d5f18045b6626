-- bucket.lua: the exact continuous bucket shared by token_bucket and the leaky_bucket meter
-- (algorithms.TokenBucket and algorithms.LeakyBucket with MaxDelay == 0). The two are one
-- machine seen from opposite sides: the token bucket stores tokens, the meter stores its
-- level = capU - tokens. The arithmetic follows the TokenBucket doc comment line by line.
--
-- Amounts are in units of 1/wg token, where g = gcd(limit, window ns), lg = limit/g and
-- wg = window/g, so one nanosecond refills exactly lg units.
-- state    hash {v = "18" (token bucket) or "34" (meter), cfg = parameters,
--               t = tokens or lv = level (units), l = last (Unix ns)}
--          (v = "17" / "33" without cfg is the encoding before parameters were recorded)
--
-- Every algorithm file defines the same four functions, collected in ALG by main.lua:
--   decode(fields, P)          the state in a stored hash (HMGET order of main.lua), or nil
--   decide(st, P, n, now, key)  allowed, remaining, retry_ns, reset_ns, new state; st nil is
--                               a fresh key; nothing is written
--   peek(st, P, now, key)      for a configuration change: R_old (the Remaining of a decision
--                               for 0 events), the instant the state was evaluated at (tc),
--                               and whether algorithms' Idle finds the state idle; nil when
--                               the state does not decode (a fresh key)
--   from(P, C, tc)             the state of a key that consumed C at tc (conversion)
--   write(key, P, st, stale)   stores a new state (stale: delete the key first)

local function bucket_decode(f, P)
  local v = int(f[P.code == TOKEN_BUCKET and 3 or 4])
  local ls, ln = ts(f[5])
  if v == nil or ls == nil or tsless(MAX_S, MAX_N, ls, ln) then
    return nil
  end
  v = math.min(math.max(v, 0), P.capU)
  if P.code == LEAKY_BUCKET then
    v = P.capU - v
  end
  return {tokens = v, l_s = ls, l_n = ln}
end

local function bucket_decide(st, P, n, now_s, now_n)
  local capU, lg, wg = P.capU, P.lg, P.wg
  -- fresh: tokens = capU, last = now (so eff = now)
  local tokens, eff_s, eff_n = capU, now_s, now_n
  if st then
    local ls, ln = st.l_s, st.l_n
    tokens = st.tokens
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

  local skew = tsdiff(eff_s, eff_n, now_s, now_n)
  local allowed, retry = false, 0
  if n <= 0 or n > P.cap then
    -- unsatisfiable: RetryAfter 0, nothing stored
  elseif tokens >= n * wg then
    tokens = tokens - n * wg
    allowed = true
  else
    retry = skew + ceildiv(n * wg - tokens, lg)
  end
  local reset = skew + ceildiv(capU - tokens, lg)
  return allowed, math.floor(tokens / wg), retry, reset, {tokens = tokens, l_s = eff_s, l_n = eff_n}
end

-- R_old is floor(tokens/wg) after the refill to eff = max(now, last), the conversion instant
-- is eff, and the bucket is idle when full (TokenBucket.Idle; for the meter, LeakyBucket.Idle:
-- the level is 0).
local function bucket_peek(st, P, now_s, now_n)
  local _, R, _, _, new = bucket_decide(st, P, 0, now_s, now_n)
  return R, new.l_s, new.l_n, new.tokens == P.capU
end

-- A key with R = cap - C whole tokens left at tc: tokens = R, last = tc; for the meter the
-- same thing is level = C.
local function bucket_from(P, C, tc_s, tc_n)
  return {tokens = (P.cap - C) * P.wg, l_s = tc_s, l_n = tc_n}
end

local function bucket_write(key, P, st, stale)
  if stale then
    redis.call('DEL', key)
  end
  local l = tsfmt(st.l_s, st.l_n)
  if P.code == TOKEN_BUCKET then
    redis.call('HSET', key, 'v', '18', 'cfg', P.str, 't', string.format('%d', st.tokens), 'l', l)
  else
    redis.call('HSET', key, 'v', '34', 'cfg', P.str, 'lv', string.format('%d', P.capU - st.tokens), 'l', l)
  end
end

-- A settlement (algorithms.Settle, the token bucket's and the meter's): delta = usage -
-- reservation applied to the bucket refilled to eff = max(now, last). A debt may leave the
-- bucket below empty, written as tokens < lg with last in the future; a refund of a bucket
-- whose last lies in the future moves last back. It returns the state to write and its reset
-- (ns from now), or nil when there is nothing to write.
local DEBT_AHEAD = 4503599627370496 -- algorithms.maxDebtAhead, 2^52 ns
local function bucket_settle(st, P, delta, now_s, now_n)
  if st == nil and delta < 0 then
    return nil
  end
  local capU, lg = P.capU, P.lg
  local _, _, _, _, b = bucket_decide(st, P, 0, now_s, now_n)
  local tokens, e_s, e_n = b.tokens, b.l_s, b.l_n
  local ahead = tsdiff(e_s, e_n, now_s, now_n) -- eff - now, at least 0
  if delta < 0 and tokens == capU and ahead <= 0 then
    return nil -- full: nothing to give back
  end
  if delta > 0 then
    local u = delta * P.wg
    if tokens >= u then
      tokens = tokens - u
    else
      local q = ceildiv(u - tokens, lg)
      if ahead + q > DEBT_AHEAD then
        tokens = 0
        if ahead < DEBT_AHEAD then
          e_s, e_n = tsadd(now_s, now_n, DEBT_AHEAD)
        end
      else
        tokens = q * lg + tokens - u
        e_s, e_n = tsadd(e_s, e_n, q)
      end
    end
  else
    local u = -delta * P.wg
    local s = math.floor(u / lg)
    local rem = u - s * lg
    if ahead <= 0 then
      tokens = math.min(tokens + u, capU)
    elseif s < ahead then
      tokens = tokens + rem
      e_s, e_n = tsadd(e_s, e_n, -s)
      if tokens >= lg and ahead - s - 1 > 0 then
        tokens = tokens - lg
        e_s, e_n = tsadd(e_s, e_n, -1)
      end
      tokens = math.min(tokens, capU)
    else
      tokens = math.min(tokens + u - ahead * lg, capU)
      e_s, e_n = now_s, now_n
    end
  end
  local reset = tsdiff(e_s, e_n, now_s, now_n) + ceildiv(capU - tokens, lg)
  return {tokens = tokens, l_s = e_s, l_n = e_n}, math.max(reset, 0)
end

-- A lease's give-back (algorithms.TokenBucket.GiveBack, LeakyBucket.GiveBack for the meter):
-- g unspent units back, up to the capacity, after the refill to eff = max(now, last). nil when
-- the bucket is full (nothing to take back).
local function bucket_giveback(st, P, g, _, _, now_s, now_n)
  local _, _, _, _, new = bucket_decide(st, P, 0, now_s, now_n)
  if new.tokens >= P.capU then
    return nil
  end
  if g >= P.cap then
    new.tokens = P.capU
  else
    new.tokens = math.min(P.capU, new.tokens + g * P.wg)
  end
  return new
end
