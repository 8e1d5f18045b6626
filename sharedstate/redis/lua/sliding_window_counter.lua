-- sliding_window_counter.lua: algorithms.SlidingWindowCounter, following its doc comment line
-- by line: estimate = prev*(1 - elapsed/W) + cur, with the weight quantised to S = 10^6
-- slices per window. A slice is W/10^6 ns, which is exactly window_ms ns.
--
-- state    hash {v = "50", cfg = parameters, ws = start of the window cur counts (Unix ns),
--               p = prev, c = cur, d = carry (absent: 0)}   (v = "49" without cfg: the
--               encoding before parameters were recorded)

local function swc_decode(f, P)
  local ws_s, ws_n = ts(f[6])
  local p, c, d = int(f[7]), int(f[8]), int(f[10]) or 0
  if ws_s == nil or p == nil or c == nil or tsless(MAX_S, MAX_N, ws_s, ws_n) or not aligned(ws_s, ws_n, P.wms) then
    return nil
  end
  c = math.min(math.max(c, 0), P.ceil)
  return {ws_s = ws_s, ws_n = ws_n, p = math.min(math.max(p, 0), P.limit), c = c, d = math.min(math.max(d, 0), c)}
end

local function swc_decide(st, P, n, now_s, now_n)
  local L, W, slice = P.limit, P.W, P.wms
  local S = 1000000
  local w_s, w_n = window_start(now_s, now_n, slice)
  local eff_s, eff_n = now_s, now_n
  local prev, cur, carry = 0, 0, 0
  if st then
    local ws_s, ws_n = st.ws_s, st.ws_n
    if tsless(w_s, w_n, ws_s, ws_n) then
      -- a stale call counts against the newer window
      w_s, w_n, eff_s, eff_n = ws_s, ws_n, ws_s, ws_n
      prev, cur, carry = st.p, st.c, st.d
    elseif w_s == ws_s and w_n == ws_n then
      prev, cur, carry = st.p, st.c, st.d
    else
      -- k windows later: cur beyond the limit (a usage debt) is carried, limit per window, into
      -- prev and then out (below the limit: prev = cur one window later); what cur carries is
      -- the carry. A difference beyond 2^53 rounds, but to a k that carries out any cur up to
      -- P.ceil.
      local k = math.floor(tsdiff(w_s, w_n, ws_s, ws_n) / W)
      prev = math.min(L, math.max(0, st.c - math.min(k - 1, st.c) * L))
      cur = math.max(0, st.c - math.min(k, st.c) * L)
      carry = cur
    end
  end

  local e = math.floor(tsdiff(eff_s, eff_n, w_s, w_n) / slice)
  local est = prev * (S - e) + cur * S
  local wrel = tsdiff(w_s, w_n, now_s, now_n)

  -- retry_rel returns the earliest instant at which n passes, relative to now: in this window,
  -- or in the first later one (k windows on) whose carried cur leaves room for n.
  local function retry_rel()
    if cur + n <= L and prev > 0 then
      local m = S - math.floor((L - cur - n) * S / prev)
      if m < S then
        return wrel + m * slice
      end
    end
    local k = ceildiv(math.max(cur + n - L, 1), L)
    local p, c = math.min(L, math.max(0, cur - (k - 1) * L)), math.max(0, cur - k * L)
    local nxt = wrel + k * W
    if p == 0 then
      return nxt
    end
    local m = S - math.floor((L - c - n) * S / p)
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
    reset = wrel + (ceildiv(cur, L) + 1) * W
  elseif prev > 0 then
    reset = wrel + W
  end
  return allowed, math.floor(math.max(0, L * S - est) / S), retry, reset,
    {ws_s = w_s, ws_n = w_n, p = prev, c = cur, d = carry}
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
  return {ws_s = w_s, ws_n = w_n, p = 0, c = C, d = 0}
end

local function swc_write(key, P, st, stale)
  if stale then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'v', '50', 'cfg', P.str, 'ws', tsfmt(st.ws_s, st.ws_n),
    'p', string.format('%d', st.p), 'c', string.format('%d', st.c), 'd', string.format('%d', st.d))
end

-- A settlement (algorithms.Settle for the sliding window counter), for a reservation counted
-- at at: as the fixed window's for cur and its carry (after the roll a decision makes), and
-- what the carry does not take of a refund of a reservation counted in the previous window
-- comes off prev. It returns the state to write and its reset (ns from now), or nil when there
-- is nothing to write.
local function swc_settle(st, P, delta, now_s, now_n, at_s, at_n)
  local _, _, _, _, new = swc_decide(st, P, 0, now_s, now_n)
  local r_s, r_n = window_start(at_s, at_n, P.wms)
  local pw_s, pw_n = tsadd(new.ws_s, new.ws_n, -P.W)
  local c, d, rest = settle_counts(new.c, new.d, delta, tsless(r_s, r_n, new.ws_s, new.ws_n), P.ceil)
  local p = new.p
  if r_s == pw_s and r_n == pw_n then
    p = math.max(p - rest, 0)
  end
  if c == new.c and d == new.d and p == new.p then
    return nil
  end
  new.p, new.c, new.d = p, c, d
  local _, _, _, reset = swc_decide(new, P, 0, now_s, now_n)
  return new, reset
end

-- A lease's give-back (algorithms.SlidingWindowCounter.GiveBack): after rolling to now,
-- cur = max(0, cur - g) when the take (at ta) fell in now's window, prev = max(0, prev - g)
-- when it fell in the window before; nil otherwise, or when that counter is 0. The carry is
-- kept, up to cur.
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
  new.d = math.min(new.d, new.c)
  return new
end
