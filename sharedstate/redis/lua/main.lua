-- main.lua: one call decides every global rule of one request and commits only if none of the
-- enforced ones denies, so a request denied by one rule is charged nothing on the others.
--
-- KEYS     one key per rule (distinct)
-- ARGV     per rule, in the order of KEYS, six integers:
--            n (the cost), shadow (0 or 1), algorithm code, limit, window (ns), capacity
--          then, for the tests only, the decision time as Unix seconds and nanoseconds (the
--          filter never sends it; Redis' TIME is used instead).
-- reply    {now_s, now_ns, committed (0|1), then per rule:
--            allowed (0|1), limit, remaining, retry_after_ns, reset_after_ns}
--          flat, because webdis turns a nested table into null.
--
-- Every rule is decided on the state as read, nothing written; then, if no enforced rule
-- denies, every rule that admitted (shadow ones included) writes its new state and TTL. A
-- shadow rule's denial blocks nothing, and a denied rule never writes. This is what the local
-- path does (filter/http.go finish()).
--
-- Configuration changes never grant allowance: a key records the parameters it was written
-- under, and a key read under other parameters is first converted at now. R_old is the
-- Remaining the old parameters' algorithm reports at now (a decision for 0 events), and the key
-- becomes the new algorithm's state of a key with R = min(R_old, capacity) left and the
-- consumption C = capacity - R made at now (see each algorithm's from function).

local ALG = {
  [TOKEN_BUCKET] = {decode = bucket_decode, decide = bucket_decide, from = bucket_from, write = bucket_write},
  [LEAKY_BUCKET] = {decode = bucket_decode, decide = bucket_decide, from = bucket_from, write = bucket_write},
  [SW_COUNTER] = {decode = swc_decode, decide = swc_decide, from = swc_from, write = swc_write},
  [SW_LOG] = {decide = swl_decide, from = swl_from, write = swl_write},
  [FIXED_WINDOW] = {decode = fw_decode, decide = fw_decide, from = fw_from, write = fw_write},
  [GCRA] = {decode = gcra_decode, decide = gcra_decide, from = gcra_from, write = gcra_write},
}
-- The hash version of each encoding that records its parameters, and of the one before.
local HASH_VERSION = {['18'] = TOKEN_BUCKET, ['34'] = LEAKY_BUCKET, ['50'] = SW_COUNTER,
  ['82'] = FIXED_WINDOW, ['98'] = GCRA}
local OLD_HASH_VERSION = {['17'] = TOKEN_BUCKET, ['33'] = LEAKY_BUCKET, ['49'] = SW_COUNTER,
  ['81'] = FIXED_WINDOW, ['97'] = GCRA}

-- load reads the state at key for a rule with parameters P. It returns the decoded state and
-- the parameters it was written under, or nil for a fresh key (missing, unreadable, or of a
-- foreign type), and whether the key holds anything that a write must delete first (another
-- layout or type).
local function load(key, P)
  local f = redis.pcall('HMGET', key, 'v', 'cfg', 't', 'lv', 'l', 'ws', 'p', 'c', 'tat')
  if type(f) == 'table' and f.err then
    -- Not a hash: a sliding-window log, or a type no script writes.
    local count = redis.pcall('LLEN', key)
    if type(count) ~= 'number' then
      return nil, nil, true
    end
    local st, Q = swl_load(key, P, count)
    return st, Q, P.code ~= SW_LOG
  end
  if f[1] == false then
    return nil, nil, false
  end
  local code, Q = HASH_VERSION[f[1]], nil
  if code ~= nil then
    Q = parse_params(f[2])
    if Q == nil or Q.code ~= code then
      return nil, nil, true
    end
  elseif OLD_HASH_VERSION[f[1]] == P.code then
    -- The encoding before parameters were recorded is read as it was then: under the rule's
    -- current parameters.
    Q = P
  else
    return nil, nil, true
  end
  local st = ALG[Q.code].decode(f, Q)
  if st == nil then
    return nil, nil, true
  end
  return st, Q, Q.code ~= P.code
end

-- now_at returns the decision time as a pair: Redis' own clock (TIME), so that every proxy
-- sees one clock whatever its own skew, or, when ARGV[i] and ARGV[i+1] are present, that
-- explicit (seconds, nanoseconds) instant. The explicit form exists for the tests only (they
-- must cover hours of simulated time and time going backwards). nil when malformed.
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

local nk = #KEYS
if nk < 1 or (#ARGV ~= 6 * nk and #ARGV ~= 6 * nk + 2) then
  return bad_args('count')
end
local rules, seen = {}, {}
for i = 1, nk do
  local b = 6 * (i - 1)
  local n, shadow = int(ARGV[b + 1]), int(ARGV[b + 2])
  local P = params(int(ARGV[b + 3]), int(ARGV[b + 4]), int(ARGV[b + 5]), int(ARGV[b + 6]))
  if n == nil or P == nil or (shadow ~= 0 and shadow ~= 1) then
    return bad_args('config')
  end
  if seen[KEYS[i]] then
    return bad_args('duplicate key')
  end
  seen[KEYS[i]] = true
  rules[i] = {P = P, n = n, shadow = shadow == 1}
end
local now_s, now_n = now_at(6 * nk + 1)
if now_s == nil then
  return bad_args('now')
end

-- Decide every rule; nothing is written yet.
local out = {now_s, now_n, 0}
local commit = true
for i = 1, nk do
  local r, key = rules[i], KEYS[i]
  local P = r.P
  local st, Q, stale = load(key, P)
  if st ~= nil and Q.str ~= P.str then
    local _, R = ALG[Q.code].decide(st, Q, 0, now_s, now_n, key)
    st = ALG[P.code].from(P, P.cap - math.min(R, P.cap), now_s, now_n)
  end
  local allowed, remaining, retry, reset, new = ALG[P.code].decide(st, P, r.n, now_s, now_n, key)
  r.allowed, r.new, r.reset, r.stale = allowed, new, reset, stale
  if not allowed and not r.shadow then
    commit = false
  end
  local o = #out
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = allowed and 1 or 0, P.limit, remaining, retry, reset
end

-- Commit: every rule that admitted writes its state and TTL.
if commit then
  for i = 1, nk do
    local r = rules[i]
    if r.allowed then
      ALG[r.P.code].write(KEYS[i], r.P, r.new, r.stale)
      expire(KEYS[i], r.reset)
    end
  end
  out[3] = 1
end
return out
