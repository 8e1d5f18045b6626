-- sliding_window_counter.lua: algorithms.SlidingWindowCounter, following its doc comment line
-- by line: estimate = prev*(1 - elapsed/W) + cur, with the weight quantised to S = 10^6
-- slices per window. A slice is W/10^6 ns, which is exactly window_ms ns.
--
-- state    hash {v = "50", cfg = parameters, ws = start of the window cur counts (Unix ns),
--               p = prev, c = cur}   (v = "49" without cfg: the encoding before parameters
--               were recorded)

local function swc_decode(f, P)
  local ws_s, ws_n = ts(f[6])
  local p, c = int(f[7]), int(f[8])
  if ws_s == nil or p == nil or c == nil or tsless(MAX_S, MAX_N, ws_s, ws_n) or not aligned(ws_s, ws_n, P.wms) then
    return nil
  end
  return {ws_s = ws_s, ws_n = ws_n, p = math.min(math.max(p, 0), P.limit), c = math.min(math.max(c, 0), P.limit)}
end

local function swc_decide(st, P, n, now_s, now_n)
  local L, W, slice = P.limit, P.W, P.wms
  local S = 1000000
  local w_s, w_n = window_start(now_s, now_n, slice)
  local eff_s, eff_n = now_s, now_n
  local prev, cur = 0, 0
  if st then
    local ws_s, ws_n = st.ws_s, st.ws_n
    local next_s, next_n = tsadd(ws_s, ws_n, W)
    if tsless(w_s, w_n, ws_s, ws_n) then
      -- a stale call counts against the newer window
      w_s, w_n, eff_s, eff_n = ws_s, ws_n, ws_s, ws_n
      prev, cur = st.p, st.c
    elseif w_s == ws_s and w_n == ws_n then
      prev, cur = st.p, st.c
    elseif w_s == next_s and w_n == next_n then
      prev, cur = st.c, 0
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
  return allowed, math.floor(math.max(0, L * S - est) / S), retry, reset,
    {ws_s = w_s, ws_n = w_n, p = prev, c = cur}
end

-- R_old is floor(max(0, L*S - est) / S) at the estimate's instant eff (now, or the stored
-- window's start when that window is newer than now's), which is the conversion instant, and
-- the key is idle when both counters are 0 once rolled to now (SlidingWindowCounter.Idle).
local function swc_peek(st, P, now_s, now_n)
  local _, R, _, _, new = swc_decide(st, P, 0, now_s, now_n)
  local at_s, at_n = now_s, now_n
  if tsless(now_s, now_n, new.ws_s, new.ws_n) then
    at_s, at_n = new.ws_s, new.ws_n
  end
  return R, at_s, at_n, new.p == 0 and new.c == 0
end

-- A key that consumed C at tc: cur = C in the window that contains tc, prev = 0.
local function swc_from(P, C, tc_s, tc_n)
  local w_s, w_n = window_start(tc_s, tc_n, P.wms)
  return {ws_s = w_s, ws_n = w_n, p = 0, c = C}
end

local function swc_write(key, P, st, stale)
  if stale then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'v', '50', 'cfg', P.str, 'ws', tsfmt(st.ws_s, st.ws_n),
    'p', string.format('%d', st.p), 'c', string.format('%d', st.c))
end

-- A settlement (algorithms.Settle for the sliding window counter), for a reservation counted
-- at at: as the fixed window's for cur (after the roll a decision makes), and a refund of a
-- reservation counted in the previous window comes off prev. It returns the state to write
-- and its reset (ns from now), or nil when there is nothing to write.
local function swc_settle(st, P, delta, now_s, now_n, at_s, at_n)
  local _, _, _, _, b = swc_decide(st, P, 0, now_s, now_n)
  local prev, cur = b.p, b.c
  local r_s, r_n = window_start(at_s, at_n, P.wms)
  local pw_s, pw_n = tsadd(b.ws_s, b.ws_n, -P.W)
  if delta > 0 then
    cur = math.min(cur + delta, P.limit)
  elseif r_s == b.ws_s and r_n == b.ws_n and cur > 0 then
    cur = math.max(cur + delta, 0)
  elseif r_s == pw_s and r_n == pw_n and prev > 0 then
    prev = math.max(prev + delta, 0)
  else
    return nil
  end
  local wrel, reset = tsdiff(b.ws_s, b.ws_n, now_s, now_n), 0
  if cur > 0 then
    reset = wrel + 2 * P.W
  elseif prev > 0 then
    reset = wrel + P.W
  end
  return {ws_s = b.ws_s, ws_n = b.ws_n, p = prev, c = cur}, reset
end

-- A lease's give-back (algorithms.SlidingWindowCounter.GiveBack): after rolling to now,
-- cur = max(0, cur - g) when the take (at ta) fell in now's window, prev = max(0, prev - g)
-- when it fell in the window before; nil otherwise, or when that counter is 0.
local function swc_giveback(st, P, g, ta_s, ta_n, now_s, now_n)
  local _, _, _, _, new = swc_decide(st, P, 0, now_s, now_n)
  local t_s, t_n = window_start(ta_s, ta_n, P.wms)
  local p_s, p_n = tsadd(new.ws_s, new.ws_n, -P.W)
  if t_s == new.ws_s and t_n == new.ws_n and new.c > 0 then
    new.c = math.max(0, new.c - g)
  elseif t_s == p_s and t_n == p_n and new.p > 0 then
    new.p = math.max(0, new.p - g)
  else
    return nil
  end
  return new
end
