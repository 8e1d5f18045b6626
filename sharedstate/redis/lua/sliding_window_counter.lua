-- sliding_window_counter.lua: algorithms.SlidingWindowCounter, following its doc comment line
-- by line: estimate = prev*(1 - elapsed/W) + cur, with the weight quantised to S = 10^6
-- slices per window. A slice is W/10^6 ns, which is exactly window_ms ns.
--
-- KEYS[1]  the key
-- ARGV     n, limit, window_ms [, now_s, now_ns]
-- state    hash {v = "49", ws = start of the window cur counts (Unix ns), p = prev, c = cur}
local key = KEYS[1]
local err, n, now_s, now_n, L, wms = script_args(2)
if err then
  return bad_args(err)
end
local S = 1000000
local W = wms * 1000000
local slice = wms

local w_s, w_n = window_start(now_s, now_n, wms)
local eff_s, eff_n = now_s, now_n
local prev, cur = 0, 0
local st = load_hash(key, '49', 'ws', 'p', 'c')
if st then
  local ws_s, ws_n = ts(st[1])
  local p, c = int(st[2]), int(st[3])
  if ws_s ~= nil and p ~= nil and c ~= nil and not tsless(MAX_S, MAX_N, ws_s, ws_n) then
    p = math.min(math.max(p, 0), L)
    c = math.min(math.max(c, 0), L)
    local next_s, next_n = tsadd(ws_s, ws_n, W)
    if tsless(w_s, w_n, ws_s, ws_n) then
      -- a stale call counts against the newer window
      w_s, w_n, eff_s, eff_n = ws_s, ws_n, ws_s, ws_n
      prev, cur = p, c
    elseif w_s == ws_s and w_n == ws_n then
      prev, cur = p, c
    elseif w_s == next_s and w_n == next_n then
      prev, cur = c, 0
    end
  end
end

local e = math.floor(tsdiff(eff_s, eff_n, w_s, w_n) / slice)
local est = prev * (S - e) + cur * S
local wrel = tsdiff(w_s, w_n, now_s, now_n)

-- retry_rel returns the earliest instant at which n passes, relative to now.
local function retry_rel()
  if cur + n <= L and prev > 0 then
    local m = S - math.floor((L - cur - n) * S / prev)
    if m < S then
      return wrel + m * slice
    end
  end
  local nxt = wrel + W
  if cur == 0 then
    return nxt
  end
  local m = S - math.floor((L - n) * S / cur)
  if m <= 0 then
    return nxt
  elseif m < S then
    return nxt + m * slice
  end
  return nxt + W
end

local allowed, retry = false, 0
if n <= 0 or n > L then
  -- unsatisfiable: RetryAfter 0, nothing stored
elseif est + n * S <= L * S then
  cur = cur + n
  est = est + n * S
  allowed = true
else
  retry = retry_rel()
end
local reset = 0
if cur > 0 then
  reset = wrel + 2 * W
elseif prev > 0 then
  reset = wrel + W
end
if allowed then
  redis.call('HSET', key, 'v', '49', 'ws', tsfmt(w_s, w_n),
    'p', string.format('%d', prev), 'c', string.format('%d', cur))
  expire(key, reset)
end
return reply(allowed, L, math.floor(math.max(0, L * S - est) / S), retry, reset, now_s, now_n)
