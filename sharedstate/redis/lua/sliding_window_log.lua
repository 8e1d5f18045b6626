-- sliding_window_log.lua: algorithms.SlidingWindowLog, following its doc comment line by line:
-- the timestamp of every admitted event of the last window, oldest first.
--
-- KEYS[1]  the key
-- ARGV     n, limit, window_ms [, now_s, now_ns]
-- state    a list of absolute timestamps (decimal Unix ns), oldest first; n events admitted
--          together are n equal entries. It is a list rather than a hash so that dropping
--          expired events (LTRIM) and admitting (RPUSH) touch only the ends, and a denial reads
--          only the entries it needs. Limit is at most 1024 (algorithms.LogLimitCeiling).
local key = KEYS[1]
local err, n, now_s, now_n, L, wms = script_args(2)
if err then
  return bad_args(err)
end
local W = wms * 1000000

-- A key of another type (a hash left by another algorithm) is a fresh key, as in load_hash.
local count = redis.pcall('LLEN', key)
if type(count) == 'table' then
  redis.call('DEL', key)
  count = 0
end

local eff_s, eff_n = now_s, now_n
local new_s, new_n -- newest stored timestamp
local dropped, first_s, first_n = 0, nil, nil
local valid = true
if count > 0 then
  new_s, new_n = ts(redis.call('LINDEX', key, -1))
  if new_s == nil or tsless(MAX_S, MAX_N, new_s, new_n) then
    valid = false
  else
    -- eff = max(now, newest): a stale call is evaluated at newest.
    if tsless(now_s, now_n, new_s, new_n) then
      eff_s, eff_n = new_s, new_n
    end
    -- Drop the leading timestamps t <= eff - W, reading the list in chunks from the front
    -- until the first live one.
    local cut_s, cut_n = tsadd(eff_s, eff_n, -W)
    local i = 0
    while valid and dropped == i and i < count do
      local chunk = redis.call('LRANGE', key, i, i + 31)
      if #chunk == 0 then
        break
      end
      for _, v in ipairs(chunk) do
        local t_s, t_n = ts(v)
        if t_s == nil then
          valid = false
          break
        end
        if tsless(cut_s, cut_n, t_s, t_n) then
          first_s, first_n = t_s, t_n
          break
        end
        dropped = dropped + 1
      end
      i = i + #chunk
    end
  end
end
if not valid then
  -- An unreadable log is a fresh key; it is rewritten from scratch on the next admission.
  count, dropped, eff_s, eff_n = 0, 0, now_s, now_n
end
local live = count - dropped

if n <= 0 or n > L then
  -- unsatisfiable: RetryAfter 0, nothing stored
  local reset = 0
  if live > 0 then
    reset = tsdiff(new_s, new_n, now_s, now_n) + W
  end
  return reply(false, L, math.max(0, L - live), 0, reset, now_s, now_n)
end

if live + n > L then
  -- Denied: the k-th oldest live timestamp must leave the window first. The state is not
  -- changed (expired entries stay until the next admission, as in the Go code).
  local k = live + n - L
  local t_s, t_n = first_s, first_n
  if k > 1 then
    t_s, t_n = ts(redis.call('LINDEX', key, dropped + k - 1))
    if t_s == nil then
      t_s, t_n = new_s, new_n
    end
  end
  local retry = tsdiff(t_s, t_n, now_s, now_n) + W
  local reset = tsdiff(new_s, new_n, now_s, now_n) + W
  return reply(false, L, math.max(0, L - live), retry, reset, now_s, now_n)
end

-- Admitted: drop the expired prefix and append n copies of eff.
if live == 0 then
  redis.call('DEL', key)
elseif dropped > 0 then
  redis.call('LTRIM', key, dropped, -1)
end
local stamp = tsfmt(eff_s, eff_n)
local add = {}
for j = 1, n do
  add[j] = stamp
end
redis.call('RPUSH', key, unpack(add))
local reset = tsdiff(eff_s, eff_n, now_s, now_n) + W
expire(key, reset)
return reply(true, L, L - (live + n), 0, reset, now_s, now_n)
