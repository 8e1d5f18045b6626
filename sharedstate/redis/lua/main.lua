-- main.lua: one call decides every global rule of one request and commits only if none of the
-- enforced ones denies, so a request denied by one rule is charged nothing on the others.
--
-- KEYS     per rule: its key; for a rule with a key bound (max_keys > 0) then also the rule's
--          key set and its overflow key (all keys distinct)
-- ARGV     per rule, in the order of KEYS, ten integers:
--            n (the cost, or a lease's batch), shadow (0 or 1), algorithm code, limit,
--            window (ns), capacity, max_keys (0: unbounded), own (the request's own cost, at
--            most n: n less a lease's reserve), give (units a lease gives back, 0: none),
--            given_at (Unix ns: the instant of the take that debited them)
--          then the call's id (an integer in [0, 2^53)), echoed in the reply;
--          then, for the tests only, the decision time as Unix seconds and nanoseconds (the
--          filter never sends it; Redis' TIME is used instead).
-- reply    {now_s, now_ns, committed (0|1), id, then per rule:
--            allowed (0|1), limit, remaining, retry_after_ns, reset_after_ns, flags}
--          flat, because webdis turns a nested table into null. flags is the sum of 1 when the
--          rule was decided on its overflow key and 2 when its give-back was applied to the
--          key's state (a give-back the state takes nothing of is not: see Give-back below).
--          The id lets the filter refuse an answer that is not to its call: webdis, when a
--          client goes away mid-call, hands that call's reply to the next request it serves.
--
-- Every rule is decided on the state as read, nothing written; then, if no enforced rule
-- denies, every rule that admitted (shadow ones included) writes its new state and TTL. A
-- shadow rule's denial blocks nothing, and a denied rule never writes. This is what the local
-- path does (filter/http.go finish()).
--
-- Configuration changes never grant allowance: a key records the parameters it was written
-- under, and a key read under other parameters is first converted (see convert below, which
-- is algorithms.consumption). R_old is the Remaining the old parameters' algorithm reports at
-- now (a decision for 0 events), and the key becomes the new algorithm's state of a key with
-- R = min(R_old, capacity) left (the whole capacity when the old algorithm finds the key
-- idle), the consumption C = capacity - R made at tc = max(now, the instant the old algorithm
-- evaluated the key at) (see each algorithm's peek and from functions).
--
-- Key bound: a rule with max_keys > 0 keeps at most max_keys live keys. Its key set (a sorted
-- set) holds every key it wrote, scored with the key's expiry (Unix ms), so expired members
-- can be dropped and the live ones counted. A key that does not exist yet, while the rule has
-- max_keys live keys, is decided on the rule's overflow key instead: a flood of new keys is
-- limited together as one client, and no key of an active client is ever evicted. A lease's
-- batch is never taken on the overflow key: there the rule is decided for its own cost, so
-- the overflowing clients together get what one client gets.
--
-- Give-back: a lease's unspent units (give > 0, debited by a take at given_at) are given back
-- to the key's state before the rule is decided (see each algorithm's giveback, which is
-- algorithms' GiveBack), when the key holds a state in the current encoding under the rule's
-- parameters; nothing on the overflow key. The reply's flags say whether it was applied, so
-- that the filter counts the units as returned or as dropped. The given-back state is written
-- even when the call does not commit the request (it changes no decision already made, and the
-- units would otherwise be lost); a call that gives nothing back writes nothing more.

local ALG = {
  [TOKEN_BUCKET] = {decode = bucket_decode, decide = bucket_decide, peek = bucket_peek, from = bucket_from,
    write = bucket_write, giveback = bucket_giveback, settle = bucket_settle},
  [LEAKY_BUCKET] = {decode = bucket_decode, decide = bucket_decide, peek = bucket_peek, from = bucket_from,
    write = bucket_write, giveback = bucket_giveback, settle = bucket_settle},
  [SW_COUNTER] = {decode = swc_decode, decide = swc_decide, peek = swc_peek, from = swc_from, write = swc_write,
    giveback = swc_giveback, settle = swc_settle},
  [SW_LOG] = {decide = swl_decide, peek = swl_peek, from = swl_from, write = swl_write},
  [FIXED_WINDOW] = {decode = fw_decode, decide = fw_decide, peek = fw_peek, from = fw_from, write = fw_write,
    giveback = fw_giveback, settle = fw_settle},
  [GCRA] = {decode = gcra_decode, decide = gcra_decide, peek = gcra_peek, from = gcra_from, write = gcra_write,
    giveback = gcra_giveback, settle = gcra_settle},
}
-- The hash version of each encoding that records its parameters, and of the one before.
local HASH_VERSION = {['18'] = TOKEN_BUCKET, ['34'] = LEAKY_BUCKET, ['50'] = SW_COUNTER,
  ['82'] = FIXED_WINDOW, ['98'] = GCRA}
local OLD_HASH_VERSION = {['17'] = TOKEN_BUCKET, ['33'] = LEAKY_BUCKET, ['49'] = SW_COUNTER,
  ['81'] = FIXED_WINDOW, ['97'] = GCRA}

-- load reads the state at key for a rule with parameters P. It returns the decoded state and
-- the parameters it was written under, or nil for a fresh key (missing, unreadable, or of a
-- foreign type), whether the key holds anything that a write must delete first (another
-- layout or type), and whether the state is in the encoding before parameters were recorded.
local function load(key, P)
  local f = redis.pcall('HMGET', key, 'v', 'cfg', 't', 'lv', 'l', 'ws', 'p', 'c', 'tat', 'd')
  if type(f) == 'table' and f.err then
    -- Not a hash: a sliding-window log, or a type no script writes.
    local count = redis.pcall('LLEN', key)
    if type(count) ~= 'number' then
      return nil, nil, true
    end
    local st, Q = swl_load(key, P, count)
    return st, Q, st == nil or P.code ~= SW_LOG
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
    local st = ALG[P.code].decode(f, P)
    return st, P, st == nil, st ~= nil
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

-- convert returns the state st, recorded under the parameters Q, as the state of P's algorithm
-- of a key with R = min(R_old, cap) left, whose consumption C = cap - R was made at
-- tc = max(now, the instant Q's algorithm evaluated st at); R = cap when Q's algorithm finds
-- st idle (it consumed nothing still counted: without this a raised capacity would deny a
-- request costing more than the old capacity for as long as each request does, a denial
-- writing nothing). nil (a fresh key) when st does not decode. This is
-- algorithms.consumption.
local function convert(st, Q, P, now_s, now_n, key)
  local R, at_s, at_n, idle = ALG[Q.code].peek(st, Q, now_s, now_n, key)
  if R == nil then
    return nil
  end
  if idle then
    R = P.cap
  end
  local tc_s, tc_n = now_s, now_n
  if tsless(now_s, now_n, at_s, at_n) then
    tc_s, tc_n = at_s, at_n
  end
  return ALG[P.code].from(P, P.cap - math.min(math.max(R, 0), P.cap), tc_s, tc_n)
end

-- lifetime_ms bounds the TTL of a key of P: a reset is at most twice the window (the sliding
-- counter) or the time a bucket takes to fill (capacity * window / limit, at most 2^53 for the
-- parameters params accepts), plus the margin.
local function lifetime_ms(P)
  return ceildiv(math.floor(math.max(2 * P.W, P.cap * P.W / P.limit)), 1000000) + TTL_MARGIN_MS
end

-- Settlement of a usage cost when its stream ends (algorithms.Settle): one key settled by
-- delta = usage - reservation, once.
-- KEYS     the key; for a rule with a key bound (max_keys > 0) then its key set and overflow
--          key; last, the settlement's id key (in the key's slot)
-- ARGV     's', delta, overflow (0|1: the reservation was decided on the overflow key), the
--          instant the reservation was decided at (Unix seconds and nanoseconds, from its
--          reply: the windows settle a reservation of an ended window on the carried debt),
--          then the rule's algorithm code, limit, window (ns), capacity, max_keys; then, for the
--          tests only, the instant as in a decision
-- reply    {now_s, now_ns, 1, 0}: a decision's head without rules, id 0 (a stale answer only
--          misreports the instant; the id key makes a settlement apply once)
-- The id key is set (NX, with a short TTL) before anything else: a settlement sent again (a
-- retry after a lost answer) finds it and writes nothing. A key recorded under other
-- parameters (the configuration changed while the stream was open) is not settled, nor is a
-- refund on a fresh or full key; an algorithm without a settle function settles nothing.
-- A key that no longer exists (expired or evicted since the reservation) is a new key of a
-- bounded rule, as in a decision: a debt on it is settled on the overflow key while the rule
-- has max_keys live keys, so a settlement never grows the key set beyond the bound.
local SETTLE_ID_TTL_MS = 60000
local function settle()
  local delta, overflow, bound = int(ARGV[2]), int(ARGV[3]), int(ARGV[10])
  local at_s, at_n = int(ARGV[4]), int(ARGV[5])
  local P = params(int(ARGV[6]), int(ARGV[7]), int(ARGV[8]), int(ARGV[9]))
  if delta == nil or P == nil or (overflow ~= 0 and overflow ~= 1) or bound == nil or bound < 0 then
    return bad_args('config')
  end
  local nk = bound > 0 and 4 or 2
  if #KEYS ~= nk or (#ARGV ~= 10 and #ARGV ~= 12) then
    return bad_args('count')
  end
  local now_s, now_n = now_at(11)
  if now_s == nil or at_s == nil or at_n == nil or at_s < 0 or at_n < 0 or at_n >= E9 then
    return bad_args('now')
  end
  local out = {now_s, now_n, 1, 0}
  if not redis.call('SET', KEYS[nk], '1', 'NX', 'PX', string.format('%d', SETTLE_ID_TTL_MS)) then
    return out
  end
  local key = KEYS[1]
  if overflow == 1 and bound > 0 then
    key = KEYS[3]
  end
  local A = ALG[P.code]
  if A.settle == nil or delta == 0 then
    return out
  end
  local now_ms = now_s * 1000 + math.floor(now_n / 1000000)
  local created = false
  if bound > 0 and key == KEYS[1] and redis.call('EXISTS', key) == 0 then
    -- Live keys are the members whose expiry is after now; a key set of another type is not
    -- counted (nor written below).
    local live = redis.pcall('ZCOUNT', KEYS[2], '(' .. string.format('%d', now_ms), '+inf')
    if type(live) == 'number' and live >= bound then
      if delta < 0 then
        return out
      end
      key = KEYS[3]
    else
      created = true
    end
  end
  local st, Q, stale = load(key, P)
  if st ~= nil and Q.str ~= P.str then
    return out
  end
  local new, reset = A.settle(st, P, delta, now_s, now_n, at_s, at_n)
  if new == nil then
    return out
  end
  A.write(key, P, new, stale)
  local ttl = expire(key, reset)
  if bound > 0 and key == KEYS[1] then
    if created then
      redis.pcall('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now_ms))
    end
    if type(redis.pcall('ZADD', KEYS[2], string.format('%d', now_ms + ttl), key)) == 'number' then
      redis.call('PEXPIRE', KEYS[2], string.format('%d', ttl + 2 * lifetime_ms(P)))
    end
  end
  return out
end
if ARGV[1] == 's' then
  return settle()
end

-- Parse the rules: seven arguments each, and one key or three.
local rules, seen = {}, {}
local k, i = 1, 0
while k <= #KEYS do
  if i + 10 > #ARGV then
    return bad_args('count')
  end
  local n, shadow, bound, own = int(ARGV[i + 1]), int(ARGV[i + 2]), int(ARGV[i + 7]), int(ARGV[i + 8])
  local P = params(int(ARGV[i + 3]), int(ARGV[i + 4]), int(ARGV[i + 5]), int(ARGV[i + 6]))
  local give, ga_s, ga_n = int(ARGV[i + 9]), ts(ARGV[i + 10])
  if n == nil or P == nil or (shadow ~= 0 and shadow ~= 1) or bound == nil or bound < 0 or own == nil
    or give == nil or ga_s == nil then
    return bad_args('config')
  end
  if tsless(MAX_S, MAX_N, ga_s, ga_n) then
    ga_s, ga_n = MAX_S, MAX_N
  end
  local r = {P = P, n = n, own = math.min(own, n), shadow = shadow == 1, bound = bound, key = KEYS[k],
    give = give, ga_s = ga_s, ga_n = ga_n}
  k = k + 1
  if bound > 0 then
    r.set, r.over = KEYS[k], KEYS[k + 1]
    k = k + 2
    if r.over == nil then
      return bad_args('count')
    end
  end
  for _, key in ipairs({r.key, r.set, r.over}) do
    if seen[key] then
      return bad_args('duplicate key')
    end
    seen[key] = true
  end
  rules[#rules + 1] = r
  i = i + 10
end
if #rules == 0 or (#ARGV ~= i + 1 and #ARGV ~= i + 3) then
  return bad_args('count')
end
local id = int(ARGV[i + 1])
if id == nil or id < 0 or id >= MAX_EXACT then
  return bad_args('id')
end
local now_s, now_n = now_at(i + 2)
if now_s == nil then
  return bad_args('now')
end
local now_ms = now_s * 1000 + math.floor(now_n / 1000000)

-- Decide every rule; nothing is written yet.
local out = {now_s, now_n, 0, id}
local commit = true
for _, r in ipairs(rules) do
  local P, key = r.P, r.key
  if r.bound > 0 then
    if redis.call('EXISTS', key) == 0 then
      -- A new key: admitted to the key set only while the rule has fewer than max_keys live
      -- keys (members whose expiry is after now). A key set of another type is not ours; it
      -- is replaced when the call commits. Nothing is written here: see the commit below.
      local live = redis.pcall('ZCOUNT', r.set, '(' .. string.format('%d', now_ms), '+inf')
      if type(live) ~= 'number' then
        live, r.badset = 0, true
      end
      if live >= r.bound then
        key, r.overflow, r.n = r.over, true, r.own
      else
        r.created = true
      end
    end
    r.track = not r.overflow
  end
  r.used = key
  local st, Q, stale, old = load(key, P)
  if st ~= nil and Q.str ~= P.str then
    st = convert(st, Q, P, now_s, now_n, key)
  elseif st ~= nil and not old and not r.overflow and r.give > 0 and ALG[P.code].giveback then
    r.gave = ALG[P.code].giveback(st, P, r.give, r.ga_s, r.ga_n, now_s, now_n)
    if r.gave then
      st = r.gave
    end
  end
  local allowed, remaining, retry, reset, new = ALG[P.code].decide(st, P, r.n, now_s, now_n, key)
  r.allowed, r.new, r.reset, r.stale = allowed, new, reset, stale
  if not allowed and not r.shadow then
    commit = false
  end
  local o = #out
  out[o + 1], out[o + 2], out[o + 3] = allowed and 1 or 0, P.limit, remaining
  out[o + 4], out[o + 5], out[o + 6] = retry, reset, (r.overflow and 1 or 0) + (r.gave and 2 or 0)
end

-- Commit: every rule that admitted writes its state and TTL, and a bounded rule records the
-- key's expiry in its key set, which outlives every member; a new key also drops the expired
-- members. Redis checks maxmemory at a script's first command that can grow memory, and lets
-- every later write through, so the decisions above write nothing and the first write here is
-- an algorithm's HSET or RPUSH (only replacing a key of another layout deletes it first).
if commit then
  for _, r in ipairs(rules) do
    if r.allowed then
      ALG[r.P.code].write(r.used, r.P, r.new, r.stale)
      local ttl = expire(r.used, r.reset)
      if r.track then
        if r.badset then
          redis.call('DEL', r.set)
        elseif r.created then
          redis.call('ZREMRANGEBYSCORE', r.set, '-inf', string.format('%d', now_ms))
        end
        redis.call('ZADD', r.set, string.format('%d', now_ms + ttl), r.key)
        redis.call('PEXPIRE', r.set, string.format('%d', ttl + 2 * lifetime_ms(r.P)))
      end
    end
  end
  out[3] = 1
end
-- A give-back the commit did not write (the rule denied, or another rule did) is written on
-- its own, with the TTL of the state it leaves.
for _, r in ipairs(rules) do
  if r.gave and not (commit and r.allowed) then
    ALG[r.P.code].write(r.used, r.P, r.gave, false)
    local _, _, _, reset = ALG[r.P.code].decide(r.gave, r.P, 0, now_s, now_n)
    expire(r.used, reset)
  end
end
return out
