-- fixed_window.lua: algorithms.FixedWindow, following its doc comment line by line.
--
-- state    hash {v = "82", cfg = parameters, ws = window start (Unix ns, a multiple of W),
--               c = count, d = carry (absent: 0)}   (v = "81" without cfg: the encoding
--               before parameters were recorded)

local function fw_decode(f, P)
  local ws_s, ws_n = ts(f[6])
  local c, d = int(f[8]), int(f[10]) or 0
  if ws_s == nil or c == nil or tsless(MAX_S, MAX_N, ws_s, ws_n) or not aligned(ws_s, ws_n, P.wms) then
    return nil
  end
  c = math.min(math.max(c, 0), P.ceil)
  return {ws_s = ws_s, ws_n = ws_n, c = c, d = math.min(math.max(d, 0), c)}
end

local function fw_decide(st, P, n, now_s, now_n)
  local limit, W = P.limit, P.W
  local w_s, w_n = window_start(now_s, now_n, P.wms)
  local count, carry = 0, 0
  if st then
    if not tsless(st.ws_s, st.ws_n, w_s, w_n) then
      -- the stored window, or a newer one a stale call counts against
      w_s, w_n = st.ws_s, st.ws_n
      count, carry = st.c, st.d
    else
      -- k windows later: a count beyond the limit (a usage debt) is repaid limit per window,
      -- and what is left is carried. A difference beyond 2^53 rounds, but to a k that repays
      -- any count up to P.ceil.
      local k = math.floor(tsdiff(w_s, w_n, st.ws_s, st.ws_n) / W)
      count = math.max(0, st.c - math.min(k, st.c) * limit)
      carry = count
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
    retry = wrel + ceildiv(count + n - limit, limit) * W
  end
  local reset = 0
  if count > 0 then
    reset = wrel + ceildiv(count, limit) * W
  end
  return allowed, math.max(0, limit - count), retry, reset, {ws_s = w_s, ws_n = w_n, c = count, d = carry}
end

-- R_old is limit - count in now's window (a newer stored window counts), the conversion
-- instant is max(now, that window's start), and the key is idle when that count is 0
-- (FixedWindow.Idle).
local function fw_peek(st, P, now_s, now_n)
  local _, R, _, _, new = fw_decide(st, P, 0, now_s, now_n)
  local at_s, at_n = now_s, now_n
  if tsless(now_s, now_n, new.ws_s, new.ws_n) then
    at_s, at_n = new.ws_s, new.ws_n
  end
  return R, at_s, at_n, new.c == 0
end

-- A key that consumed C at tc: count = C in the window that contains tc.
local function fw_from(P, C, tc_s, tc_n)
  local w_s, w_n = window_start(tc_s, tc_n, P.wms)
  return {ws_s = w_s, ws_n = w_n, c = C, d = 0}
end

local function fw_write(key, P, st, stale)
  if stale then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'v', '82', 'cfg', P.str, 'ws', tsfmt(st.ws_s, st.ws_n), 'c', string.format('%d', st.c),
    'd', string.format('%d', st.d))
end

-- A settlement (algorithms.Settle for the fixed window), for a reservation counted at at: the
-- count and carry of now's window (after the roll of a decision) as settle_counts makes them.
-- It returns the state to write and its reset (ns from now), or nil when there is nothing to
-- write.
local function fw_settle(st, P, delta, now_s, now_n, at_s, at_n)
  local _, _, _, _, new = fw_decide(st, P, 0, now_s, now_n)
  local r_s, r_n = window_start(at_s, at_n, P.wms)
  local c, d = settle_counts(new.c, new.d, delta, tsless(r_s, r_n, new.ws_s, new.ws_n), P.ceil)
  if c == new.c and d == new.d then
    return nil
  end
  new.c, new.d = c, d
  local _, _, _, reset = fw_decide(new, P, 0, now_s, now_n)
  return new, reset
end

-- A lease's give-back (algorithms.FixedWindow.GiveBack): count = max(0, count - g) (count up
-- to the debt ceiling, so no usage debt is forgiven), carry = min(carry, count), only while
-- the stored window is the one the take fell in (at ta) and is not older than now's. nil
-- otherwise, or when the count is 0.
local function fw_giveback(st, P, g, ta_s, ta_n, now_s, now_n)
  local t_s, t_n = window_start(ta_s, ta_n, P.wms)
  local w_s, w_n = window_start(now_s, now_n, P.wms)
  if st.c <= 0 or t_s ~= st.ws_s or t_n ~= st.ws_n or tsless(st.ws_s, st.ws_n, w_s, w_n) then
    return nil
  end
  local c = math.max(0, st.c - g)
  return {ws_s = st.ws_s, ws_n = st.ws_n, c = c, d = math.min(st.d, c)}
end
