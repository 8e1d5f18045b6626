-- fixed_window.lua: algorithms.FixedWindow, following its doc comment line by line.
--
-- KEYS[1]  the key
-- ARGV     n, limit, window_ms [, now_s, now_ns]
-- state    hash {v = "81", ws = window start (Unix ns, a multiple of W), c = count}
local key = KEYS[1]
local err, n, now_s, now_n, limit, wms = script_args(2)
if err then
  return bad_args(err)
end
local W = wms * 1000000

local w_s, w_n = window_start(now_s, now_n, wms)
local count = 0
local st = load_hash(key, '81', 'ws', 'c')
if st then
  local ws_s, ws_n = ts(st[1])
  local c = int(st[2])
  if ws_s ~= nil and c ~= nil and not tsless(MAX_S, MAX_N, ws_s, ws_n) then
    if tsless(w_s, w_n, ws_s, ws_n) then
      -- a stale call counts against the newer window
      w_s, w_n = ws_s, ws_n
      count = math.min(math.max(c, 0), limit)
    elseif w_s == ws_s and w_n == ws_n then
      count = math.min(math.max(c, 0), limit)
    end
  end
end

local wrel = tsdiff(w_s, w_n, now_s, now_n)
local allowed, retry = false, 0
if n <= 0 or n > limit then
  -- unsatisfiable: RetryAfter 0, nothing stored
elseif count + n <= limit then
  count = count + n
  allowed = true
else
  retry = wrel + W
end
local reset = 0
if count > 0 then
  reset = wrel + W
end
if allowed then
  redis.call('HSET', key, 'v', '81', 'ws', tsfmt(w_s, w_n), 'c', string.format('%d', count))
  expire(key, reset)
end
return reply(allowed, limit, limit - count, retry, reset, now_s, now_n)
