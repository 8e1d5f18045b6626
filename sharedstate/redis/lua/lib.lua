-- lib.lua: helpers shared by every algorithm. scripts.go concatenates lib.lua, window.lua,
-- one file per algorithm and main.lua into one source with one SHA1.
--
-- Lua 5.1 numbers are IEEE doubles: integers are exact only up to 2^53. Unix-nanosecond
-- timestamps (about 1.8e18) are therefore never held in one number. They are kept as a pair
-- (s, n) = (whole seconds, nanoseconds 0..999999999), stored as their exact decimal string
-- (the int64 the Go code would hold), and only ever compared, moved by a bounded duration, or
-- subtracted; a difference is a plain number and exact whenever it is below 2^53 (104 days),
-- which is all the Go algorithms need (they only compare larger differences with bounds below
-- 2^53, and a rounded difference compares the same way).
--
-- Every number handed to redis.call is formatted with %d: Redis would format a Lua number
-- with %.17g, which turns large integers into exponent notation.

-- Redis 7 replicates scripts by their effects (the writes), which is what lets a script read
-- TIME and then write. Older servers need it switched on; from 7.0 the call is a no-op.
if redis.replicate_commands then
  redis.replicate_commands()
end

local E9 = 1000000000
-- MaxTime of package algorithms (2^62 ns) as a pair; now is clamped to [0, MaxTime].
local MAX_S, MAX_N = 4611686018, 427387904

-- int parses a decimal integer argument or stored field; anything else (including the
-- forms tonumber would accept, such as hex, exponents or spaces) is nil.
local function int(v)
  if type(v) ~= 'string' or #v > 20 or not string.match(v, '^%-?%d+$') then
    return nil
  end
  return tonumber(v)
end

-- ts parses a stored absolute timestamp (decimal Unix ns, at most 19 digits) into a pair.
local function ts(v)
  if type(v) ~= 'string' or #v == 0 or #v > 19 or not string.match(v, '^%d+$') then
    return nil
  end
  local l = #v
  if l <= 9 then
    return 0, tonumber(v)
  end
  return tonumber(string.sub(v, 1, l - 9)), tonumber(string.sub(v, l - 8))
end

-- tsfmt renders a pair as the decimal Unix-ns string ts reads back.
local function tsfmt(s, n)
  if s > 0 then
    return string.format('%d%09d', s, n)
  end
  return string.format('%d', n)
end

-- tsadd returns the pair (s, n) moved by d ns, for an integer d with |d| <= 2^53. d is split
-- into whole seconds first, so no intermediate exceeds |d|: floor(d/1e9) is exact because the
-- quotient is below 2^24 and a non-integer quotient is at least 1e-9 from an integer, more
-- than its rounding error.
local function tsadd(s, n, d)
  local q = math.floor(d / E9)
  n = n + (d - q * E9)
  s = s + q
  if n >= E9 then
    n = n - E9
    s = s + 1
  end
  return s, n
end

-- tsdiff returns a - b in ns: exact below 2^53 in magnitude, monotone (rounded) beyond.
local function tsdiff(as, an, bs, bn)
  return (as - bs) * E9 + (an - bn)
end

-- tsless reports a < b.
local function tsless(as, an, bs, bn)
  return as < bs or (as == bs and an < bn)
end

-- ceildiv is ceil(a/b) for a >= 0, b > 0 and a + b <= 2^53, written as the Go code writes it
-- (floor((a+b-1)/b)); the floor of a double quotient is exact under that bound (see package
-- algorithms).
local function ceildiv(a, b)
  return math.floor((a + b - 1) / b)
end

local function bad_args(what)
  return redis.error_reply('ERR ratelimit: bad arguments (' .. what .. ')')
end

-- expire keeps a written key alive until it is back to its full allowance (reset_ns from now),
-- rounded up to whole milliseconds, plus TTL_MARGIN_MS. An expired key reads as fresh, which
-- is exactly the state it had reached by then, so expiry only frees memory.
-- It returns the TTL in milliseconds.
local TTL_MARGIN_MS = 1000
local function expire(key, reset_ns)
  local ttl = ceildiv(reset_ns, 1000000) + TTL_MARGIN_MS
  redis.call('PEXPIRE', key, string.format('%d', ttl))
  return ttl
end

-- gcd of two positive integers below 2^52. Lua 5.1 computes a % b as a - floor(a/b)*b; the
-- quotient of two such integers is never rounded across an integer (see ceildiv), and the
-- result is corrected into [0, b) anyway.
local function gcd(a, b)
  while b ~= 0 do
    local r = a - math.floor(a / b) * b
    if r < 0 then
      r = r + b
    elseif r >= b then
      r = r - b
    end
    a, b = b, r
  end
  return a
end

-- Algorithm codes, as scripts.go sends them and as a key records them.
local TOKEN_BUCKET, LEAKY_BUCKET, SW_COUNTER, SW_LOG, FIXED_WINDOW, GCRA = 1, 2, 3, 4, 5, 6
local MAX_EXACT = 9007199254740992 -- 2^53
local LIMIT_CEILING = 1000000000 -- algorithms.LimitCeiling
local LOG_LIMIT_CEILING = 1024 -- algorithms.LogLimitCeiling
local MAX_WINDOW = 2678400000000000 -- algorithms.MaxWindow (31 days) in ns

-- params validates one rule's parameters (algorithm code, limit, window in ns, capacity) and
-- derives what its algorithm computes with, under the bounds package algorithms enforces, so
-- the arithmetic stays exact. It returns nil for parameters Go would refuse: the current rule's
-- come from a validated configuration, and a stored key's are checked again because Redis
-- contents are not trusted. str is the canonical form a key records ("code:limit:window:cap");
-- two parameter sets are equal exactly when their str are.
local function params(code, limit, W, cap)
  if code == nil or limit == nil or W == nil or cap == nil or limit < 1 or limit > LIMIT_CEILING
    or cap < 1 or cap > LIMIT_CEILING or W < 1000000 or W > MAX_WINDOW or W % 1000000 ~= 0 then
    return nil
  end
  local P = {code = code, limit = limit, W = W, cap = cap}
  if code == TOKEN_BUCKET or code == LEAKY_BUCKET then
    local g = gcd(limit, W)
    P.lg, P.wg = limit / g, W / g
    P.capU = cap * P.wg
    if P.capU + P.wg + 2 * P.lg > MAX_EXACT then
      return nil
    end
  elseif code == GCRA then
    P.T = math.floor(W / limit)
    if P.T < 1 or P.T * (cap + 1) > MAX_EXACT then
      return nil
    end
    P.tau = P.T * cap
  elseif code == SW_COUNTER or code == SW_LOG or code == FIXED_WINDOW then
    -- Windows have no burst: their capacity is the limit.
    if cap ~= limit or (code == SW_LOG and limit > LOG_LIMIT_CEILING) then
      return nil
    end
    P.wms = W / 1000000
    -- algorithms.debtCeiling: the most a count holds, its debt included (2^52 ns of windows,
    -- at least two, within 2^32 - 1). The product may round above 2^53, where the min drops it.
    P.ceil = math.min(4294967295, limit * math.max(2, math.floor(4503599627370496 / W)))
  else
    return nil
  end
  P.str = string.format('%d:%d:%d:%d', code, limit, W, cap)
  return P
end

-- parse_params reads the parameters a key recorded (see params); nil when malformed.
local function parse_params(s)
  if type(s) ~= 'string' or #s > 80 then
    return nil
  end
  local c, l, w, b = string.match(s, '^(%d+):(%d+):(%d+):(%d+)$')
  if c == nil then
    return nil
  end
  local P = params(int(c), int(l), int(w), int(b))
  if P == nil or P.str ~= s then
    return nil
  end
  return P
end
