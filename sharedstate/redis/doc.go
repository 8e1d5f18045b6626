// Package redis is the Redis side of global rate limits: the Lua script that keeps the rules'
// state in Redis, the encoding of one call as a webdis request, and the decoding of the answer.
// It does no I/O: the filter sends the request as an Envoy HTTP callout and hands the answer to
// ParseReplies, so the package compiles for wasip1 and costs no allocation per call once the
// caller reuses its buffers.
//
// # Why webdis, and what it takes
//
// Envoy lets a filter reach the outside only through HTTP callouts to configured clusters, so
// Redis is reached through webdis, an HTTP front for Redis. All of one request's global rules
// are one callout:
//
//	:method POST   :path /   content-type application/x-www-form-urlencoded
//	body  EVALSHA/<sha1>/<k>/<escaped key 1>/.../<escaped key k>/<args of rule 1>/...
//
// webdis splits the body at '/', percent-decodes each argument and sends the command to Redis;
// the JSON answer is {"EVALSHA":[...]}. webdis answers 200 also for Redis errors
// ({"EVALSHA":[false,"ERR ..."]}), 503 when it cannot reach Redis, and 403 for a command its
// ACL forbids. MULTI/EXEC/WATCH are refused, so every call is one Lua script, which Redis
// runs atomically. Measured with webdis 0.1.9 and redis 7.0.15 (see the tests), webdis:
//
//   - splits at every raw '/', percent-decodes %XX (upper or lower case hex) and leaves a '%'
//     that is not followed by two hex digits as it is;
//   - decodes '+' to a space;
//   - cuts the body at the first raw '?' and ignores the rest;
//   - strips a known extension (.json .raw .txt .html .xml .png .jpg .js .css .bin ...) from
//     the last argument and changes the reply format accordingly (.txt gives text/plain);
//   - passes raw spaces, tabs, CR, LF, NUL and non-UTF-8 bytes to Redis unchanged;
//   - treats an all-digit first component as a database number ("1/SET/k/v" runs in DB 1);
//   - sends an empty argument for an empty component, also a trailing one ("SET/k/");
//   - drops strings that are not valid UTF-8 from JSON answers: an array element vanishes,
//     an error message becomes [false];
//   - ignores the Content-Type; answers 403 to an empty body.
//
// Escape therefore percent-encodes every byte outside [A-Za-z0-9_-], so a request-derived key
// is always exactly one argument with exactly its bytes, and nothing in it can add arguments
// (which could, for example, override the rule's limit), truncate the command or change the
// reply format. Numbers are rendered as decimal digits (and '-'), which need no escaping.
//
// Scripts must return flat arrays of integers: webdis turns a nested table into null, and
// Redis truncates Lua numbers to integers.
//
// # Keys, hash tags and sharded stores
//
// A sharded store (Redis Cluster, twemproxy, Envoy's redis_proxy) runs a script only when all
// of its keys are on one slot, placed by the key's hash tag, the part inside {braces}. The
// number of partitions (redis.partitions) chooses the layout (docs/global-limits.md tells
// operators what each costs):
//
//   - 1 partition (the default): <prefix>:{<domain>}:<rule>:<descriptor> (AppendKey). One call
//     touches the keys of all of a request's global rules: one round trip, all-or-nothing
//     across its rules (below).
//   - P > 1 partitions: <prefix>:{<domain>:<rule>:<p>}:<descriptor> (AppendPartKey), with
//     p = SipHash-2-4(secret, descriptor) mod P (Partition). Each partition has its own key set
//     and overflow key in its slot (Rule.Partitioned) and admits ceil(max_keys/P) live keys.
//     The filter sends one call per global rule, all at once, and each commits on its own: a
//     request denied by one rule may have been charged by the others (at most one request
//     over-counted per other rule, never an extra admission).
//
// The partition is keyed so that nobody can compute offline which clients share a partition
// and fill it. The secret lives in Redis under <prefix>:{<domain>}:#partition-secret
// (AppendSecretKey). A VM that does not know it sends the secret call first (AppendSecretCall,
// lua/secret.lua) with a random candidate, which the script stores only when there is no
// secret, and returns the stored one; a VM offers its own again every minute from its tick, so
// a secret Redis lost is stored again, or every proxy adopts the one that won. Changing the
// number of partitions renames every key: the global counts start afresh.
//
// # The script, time and state
//
// There is one script for the decisions (lua/*.lua but secret.lua, concatenated): one set of
// functions per algorithm with a global mode (token_bucket, leaky_bucket meter,
// sliding_window counter and log, fixed_window, gcra) and a main part that runs a call. adaptive and the leaky-bucket shaper are local only.
// Each algorithm is a line-by-line port of the arithmetic documented on its type in package
// algorithms, and a differential test against a real redis-server demands identical decisions
// from both on random sequences.
//
// The same script settles a usage cost when its stream ends (Settlement, AppendSettleSHA;
// lua/main.lua's settle): its first argument 's' selects the mode, and one key is settled by
// delta = usage - reservation with algorithms.Settle's arithmetic (bucket_settle,
// gcra_settle, fw_settle, swc_settle), once per settlement id. TestDifferentialSettle demands that Go and the script
// agree on every decision after settlements.
//
// A call decides every rule on its state as read, writing nothing; then, only if no enforced
// (non-shadow) rule denies, every rule that admitted writes its new state (shadow rules
// included, as in the filter's local path). A shadow rule's denial blocks nothing, and a
// denied rule never writes. So a request denied by one global rule is charged nothing on the
// others, and a flood of denied requests generates no writes and no replication traffic.
//
// Arguments after the keys are ten integers per rule, in the order of the keys:
//
//	n (the cost)  shadow (0|1)  algorithm code  limit  window (ns)  capacity (burst, or limit)
//	max_keys (0: unbounded)  own (the request's own cost: n less a lease's reserve)
//	give (a lease's unspent units given back, 0: none)  given_at (Unix ns of their take)
//
// A key decided on the rule's overflow key is decided for own, not n: no lease there. Units
// given back are returned to the key's state before the decision, as package algorithms'
// GiveBack returns them (a differential test holds the two to the same results).
//
// with the codes 1 token_bucket, 2 leaky_bucket meter, 3 sliding_window counter, 4
// sliding_window log, 5 fixed_window, 6 gcra. The script derives what each algorithm computes
// with (g = gcd(limit, window ns) and units of 1/(window/g) token for the buckets, the emission
// interval T = window/limit for GCRA, the window in ms for the windows) and refuses parameters
// package algorithms would refuse. The answer is one flat array:
//
//	{now_s, now_ns, committed (0|1), then per rule: allowed (0|1), limit, remaining,
//	 retry_after_ns, reset_after_ns}
//
// The clock is Redis' TIME, so every proxy decides on one clock whatever its own skew. Lua
// numbers are doubles, exact only up to 2^53, so absolute Unix-nanosecond timestamps are
// stored as their exact decimal string and handled as (seconds, nanoseconds) pairs; only
// differences below 2^53 ns (104 days) are ever needed as plain numbers (see lua/lib.lua).
//
// State layouts. Every state records the parameters it was written under, cfg =
// "<code>:<limit>:<window ns>:<capacity>"; v is the Go version byte in decimal plus one, so
// it never matches the v1 encoding, which records no parameters (v = the Go version byte, no
// cfg) and is still read, under the rule's current parameters:
//
//	token_bucket            hash  v=18 cfg t=<tokens, 1/wg units> l=<last, Unix ns>
//	leaky_bucket (meter)    hash  v=34 cfg lv=<level, 1/wg units> l=<last, Unix ns>
//	sliding_window counter  hash  v=50 cfg ws=<window start, Unix ns> p=<prev> c=<cur>
//	sliding_window log      list  "p<cfg>", then <Unix ns> per admitted event, oldest first
//	fixed_window            hash  v=82 cfg ws=<window start, Unix ns> c=<count>
//	gcra                    hash  v=98 cfg tat=<theoretical arrival time, Unix ns>
//
// A key of a Redis type no script writes, or whose fields or parameters do not decode, is a
// fresh key, as an unknown version byte is in Go; it is replaced on the next admission.
//
// Configuration changes never grant allowance. A key whose recorded parameters differ from
// the rule's (any of them, algorithm included) is converted first, exactly as package
// algorithms converts a state (see its "Configuration changes"; R = capacity_new also when the
// old algorithm finds the key idle), and the converted state is written only if the call
// commits. TestDifferentialConfigChange runs the Go limiters and the script through changes
// between every pair of global configurations and demands the same decisions and states.
//
// A write sets the key's TTL to reset_after (the time until the key is back to its full
// allowance) rounded up to whole milliseconds plus one second, so idle keys disappear and an
// expired key reads as exactly the fresh state it had reached. A denial changes nothing.
//
// For the tests only, two more arguments (Unix seconds and nanoseconds) replace TIME, so long
// spans and time going backwards can be tested deterministically. The filter never sends
// them, and because keys are escaped a client cannot add them.
//
// # Least privilege
//
// The filter sends only EVALSHA and EVAL, and the script calls only TIME, HMGET, HSET,
// PEXPIRE, DEL, EXISTS, LLEN, LINDEX, LRANGE, LTRIM, LPUSH, RPUSH, ZCOUNT, ZADD and
// ZREMRANGEBYSCORE on the rate-limit keys: docs/global-limits.md gives the Redis ACL and the
// webdis configuration that allow no more (TestLeastPrivilege), and the Redis versions and
// sharding proxies tested.
package redis
