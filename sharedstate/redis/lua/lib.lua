-- lib.lua: helpers shared by every rate-limit script. scripts.go prepends this file to each
-- algorithm's file, so every script is one self-contained source with its own SHA1.
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

-- now_at returns the decision time as a pair: Redis' own clock (TIME), so that every proxy
-- sees one clock whatever its own skew, or, when ARGV[i] and ARGV[i+1] are present, that
-- explicit (seconds, nanoseconds) instant. The explicit form exists for the differential tests
-- only (they must cover hours of simulated time and time going backwards); the filter never
-- sends it. nil when the override is malformed.
local function now_at(i)
  local s, n
  if ARGV[i] ~= nil then
    s, n = int(ARGV[i]), int(ARGV[i + 1])
    if s == nil or n == nil or n < 0 or n >= E9 then
      return nil
    end
  else
    local t = redis.call('TIME')
    s, n = tonumber(t[1]), tonumber(t[2]) * 1000
  end
  if s < 0 then
    return 0, 0
  end
  if s > MAX_S or (s == MAX_S and n > MAX_N) then
    return MAX_S, MAX_N
  end
  return s, n
end

-- script_args parses the arguments every script takes: ARGV = n, then k configuration
-- integers, each at least 1, then the optional test clock (now_s, now_ns; see now_at). It
-- returns nil, n, now_s, now_n and the k values; or what is wrong ('count', 'config' or 'now')
-- for bad_args. One parser for every script keeps them refusing the same malformed lists.
local function script_args(k)
  if #ARGV ~= k + 1 and #ARGV ~= k + 3 then
    return 'count'
  end
  local n = int(ARGV[1])
  if n == nil then
    return 'config'
  end
  local cfg = {}
  for i = 1, k do
    local v = int(ARGV[i + 1])
    if v == nil or v < 1 then
      return 'config'
    end
    cfg[i] = v
  end
  local now_s, now_n = now_at(k + 2)
  if now_s == nil then
    return 'now'
  end
  return nil, n, now_s, now_n, unpack(cfg)
end

-- load_hash reads the hash fields of a key written with version ver. It returns nil for a
-- fresh key: missing, written by another algorithm (another version, or another Redis type),
-- in which case the stale key is deleted so its leftover fields cannot linger. This mirrors
-- the Go rule that a state with an unknown version byte is a fresh key.
local function load_hash(key, ver, ...)
  local r = redis.pcall('HMGET', key, 'v', ...)
  if type(r) == 'table' and r.err then
    redis.call('DEL', key)
    return nil
  end
  if r[1] == false then
    return nil
  end
  if r[1] ~= ver then
    redis.call('DEL', key)
    return nil
  end
  table.remove(r, 1)
  return r
end

-- expire keeps a written key alive until it is back to its full allowance (reset_ns from now),
-- rounded up to whole milliseconds, plus TTL_MARGIN_MS. An expired key reads as fresh, which
-- is exactly the state it had reached by then, so expiry only frees memory.
local TTL_MARGIN_MS = 1000
local function expire(key, reset_ns)
  redis.call('PEXPIRE', key, string.format('%d', ceildiv(reset_ns, 1000000) + TTL_MARGIN_MS))
end

-- reply is the flat array every script returns: nested tables would reach webdis as null.
local function reply(allowed, limit, remaining, retry_ns, reset_ns, now_s, now_n)
  return {allowed and 1 or 0, limit, remaining, retry_ns, reset_ns, now_s, now_n}
end
