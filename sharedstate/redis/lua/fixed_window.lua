-- fixed_window.lua: algorithms.FixedWindow, following its doc comment line by line.
--
-- state    hash {v = "82", cfg = parameters, ws = window start (Unix ns, a multiple of W),
--               c = count}   (v = "81" without cfg: the encoding before parameters were recorded)

local function fw_decode(f, P)
  local ws_s, ws_n = ts(f[6])
  local c = int(f[8])
  if ws_s == nil or c == nil or tsless(MAX_S, MAX_N, ws_s, ws_n) then
    return nil
  end
  return {ws_s = ws_s, ws_n = ws_n, c = c}
end

local function fw_decide(st, P, n, now_s, now_n)
  local limit, W = P.limit, P.W
  local w_s, w_n = window_start(now_s, now_n, P.wms)
  local count = 0
  if st then
    if tsless(w_s, w_n, st.ws_s, st.ws_n) then
      -- a stale call counts against the newer window
      w_s, w_n = st.ws_s, st.ws_n
      count = math.min(math.max(st.c, 0), limit)
    elseif w_s == st.ws_s and w_n == st.ws_n then
      count = math.min(math.max(st.c, 0), limit)
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
  return allowed, limit - count, retry, reset, {ws_s = w_s, ws_n = w_n, c = count}
end

-- A key that consumed C at now: count = C in the window that contains now.
local function fw_from(P, C, now_s, now_n)
  local w_s, w_n = window_start(now_s, now_n, P.wms)
  return {ws_s = w_s, ws_n = w_n, c = C}
end

local function fw_write(key, P, st, stale)
  if stale then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'v', '82', 'cfg', P.str, 'ws', tsfmt(st.ws_s, st.ws_n), 'c', string.format('%d', st.c))
end
