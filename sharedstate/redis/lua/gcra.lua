-- gcra.lua: algorithms.GCRA (the virtual scheduling algorithm of ITU-T I.371), following its
-- doc comment line by line. T = window / limit (emission interval, ns), tau = T * burst.
--
-- state    hash {v = "98", cfg = parameters, tat = theoretical arrival time (Unix ns)}
--          (v = "97" without cfg: the encoding before parameters were recorded)

-- The largest TAT a state may hold: MaxTime + 2^53 ns.
local MAXTAT_S, MAXTAT_N = 4620693217, 682128896

local function gcra_decode(f, P)
  local t_s, t_n = ts(f[9])
  if t_s == nil or tsless(MAXTAT_S, MAXTAT_N, t_s, t_n) then
    return nil
  end
  return {tat_s = t_s, tat_n = t_n}
end

local function gcra_decide(st, P, n, now_s, now_n)
  local T, B, tau = P.T, P.cap, P.tau
  -- base = max(TAT, now), kept relative to now (it is at most tau plus clock skew ahead).
  local base_s, base_n = now_s, now_n
  if st and tsless(now_s, now_n, st.tat_s, st.tat_n) then
    base_s, base_n = st.tat_s, st.tat_n
  end
  local brel = tsdiff(base_s, base_n, now_s, now_n)

  local allowed, retry, remaining, reset = false, 0, 0, 0
  local new
  if n <= 0 or n > B then
    -- unsatisfiable: RetryAfter 0, nothing stored
    remaining = math.floor(math.max(0, tau - brel) / T)
    reset = brel
  else
    local allow_at = brel + n * T - tau
    if allow_at > 0 then
      retry = allow_at
      remaining = math.floor(math.max(0, tau - brel) / T)
      reset = brel
    else
      allowed = true
      remaining = math.floor(-allow_at / T)
      reset = brel + n * T
      local t_s, t_n = tsadd(base_s, base_n, n * T)
      new = {tat_s = t_s, tat_n = t_n}
    end
  end
  return allowed, remaining, retry, reset, new
end

-- R_old is floor(max(0, now + tau - max(TAT, now)) / T), evaluated at now itself (GCRA keeps
-- no "last seen" instant), and the key is idle when TAT <= now (GCRA.Idle).
local function gcra_peek(st, P, now_s, now_n)
  local _, R = gcra_decide(st, P, 0, now_s, now_n)
  return R, now_s, now_n, not tsless(now_s, now_n, st.tat_s, st.tat_n)
end

-- A key that consumed C at tc: TAT = tc + C * T.
local function gcra_from(P, C, tc_s, tc_n)
  local t_s, t_n = tsadd(tc_s, tc_n, C * P.T)
  return {tat_s = t_s, tat_n = t_n}
end

local function gcra_write(key, P, st, stale)
  if stale then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'v', '98', 'cfg', P.str, 'tat', tsfmt(st.tat_s, st.tat_n))
end

-- A settlement (algorithms.Settle for GCRA): with base = max(TAT, now), a debt moves TAT to
-- min(base + delta*T, max(TAT, now + 2^52)); a refund to max(TAT + delta*T, now) when TAT lies
-- ahead of now (a full key has nothing to give back). It returns the state to write and its
-- reset (ns from now), or nil when there is nothing to write.
local function gcra_settle(st, P, delta, now_s, now_n)
  local t_s, t_n = now_s, now_n
  if st then
    t_s, t_n = st.tat_s, st.tat_n
  end
  local n_s, n_n
  if delta > 0 then
    local b_s, b_n = t_s, t_n
    if tsless(t_s, t_n, now_s, now_n) then
      b_s, b_n = now_s, now_n
    end
    n_s, n_n = tsadd(b_s, b_n, delta * P.T)
    local c_s, c_n = tsadd(now_s, now_n, 4503599627370496)
    if tsless(c_s, c_n, t_s, t_n) then
      c_s, c_n = t_s, t_n
    end
    if tsless(c_s, c_n, n_s, n_n) then
      n_s, n_n = c_s, c_n
    end
  elseif tsless(now_s, now_n, t_s, t_n) then
    n_s, n_n = tsadd(t_s, t_n, delta * P.T)
    if tsless(n_s, n_n, now_s, now_n) then
      n_s, n_n = now_s, now_n
    end
  else
    return nil
  end
  return {tat_s = n_s, tat_n = n_n}, math.max(tsdiff(n_s, n_n, now_s, now_n), 0)
end

-- A lease's give-back (algorithms.GCRA.GiveBack): TAT = max(now, TAT - g*T); nil when
-- TAT <= now (nothing to take back).
local function gcra_giveback(st, P, g, _, _, now_s, now_n)
  if not tsless(now_s, now_n, st.tat_s, st.tat_n) then
    return nil
  end
  if g >= P.cap then
    return {tat_s = now_s, tat_n = now_n}
  end
  local t_s, t_n = tsadd(st.tat_s, st.tat_n, -g * P.T)
  if tsless(t_s, t_n, now_s, now_n) then
    t_s, t_n = now_s, now_n
  end
  return {tat_s = t_s, tat_n = t_n}
end
