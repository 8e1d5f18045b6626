-- gcra.lua: algorithms.GCRA, following its doc comment line by line.
--
-- KEYS[1]  the key
-- ARGV     n, limit, burst (Burst, or Limit when 0), T (emission interval, ns) [, now_s, now_ns]
-- state    hash {v = "97", tat = theoretical arrival time (Unix ns)}
local key = KEYS[1]
local err, n, now_s, now_n, limit, B, T = script_args(3)
if err then
  return bad_args(err)
end
local tau = T * B
-- The largest TAT a state may hold: MaxTime + 2^53 ns.
local MAXTAT_S, MAXTAT_N = 4620693217, 682128896

-- base = max(TAT, now), kept relative to now (it is at most tau plus clock skew ahead).
local base_s, base_n = now_s, now_n
local st = load_hash(key, '97', 'tat')
if st then
  local t_s, t_n = ts(st[1])
  if t_s ~= nil and not tsless(MAXTAT_S, MAXTAT_N, t_s, t_n) and tsless(now_s, now_n, t_s, t_n) then
    base_s, base_n = t_s, t_n
  end
end
local brel = tsdiff(base_s, base_n, now_s, now_n)

local allowed, retry, remaining, reset = false, 0, 0, 0
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
    redis.call('HSET', key, 'v', '97', 'tat', tsfmt(t_s, t_n))
    expire(key, reset)
  end
end
return reply(allowed, limit, remaining, retry, reset, now_s, now_n)
