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
// The descriptor is written as it is, whatever its bytes, with a second '#' when it starts
// with '#', so that it never names a rule's own keys (#keys, #overflow; see AppendKey).
//
// The partition is keyed so that nobody can compute offline which clients share a partition
// and fill it. The secret lives in Redis under <prefix>:{<domain>}:#partition-secret
// (AppendSecretKey). A VM that does not know it sends the secret call first (AppendSecretCall,
// lua/secret.lua) with a random candidate, which the script stores only when there is no
// secret, and returns the stored one; a VM offers its own again every minute from its tick, so
// a secret Redis lost is stored again, or every proxy adopts the one that won. Changing the
// number of partitions renames every key: the global counts start afresh.
//
// # The script
//
// There is one script for the decisions (lua/*.lua but secret.lua, concatenated): one set of
// functions per algorithm with a global mode (token_bucket, leaky_bucket meter, sliding_window
// counter and log, fixed_window, gcra; adaptive and the shaper are local only) and a main part
// that runs a call. Each algorithm is a line-by-line port of the arithmetic documented on its
// type in package algorithms, and differential tests against a real redis-server demand the
// same decisions and stored states from both, across random sequences, configuration changes
// (TestDifferentialConfigChange), lease give-backs and usage settlements
// (TestDifferentialSettle).
//
// lua/main.lua's header is the call's specification: its keys, the ten integers per rule
// after them (AppendEvalSHA writes them), the flat answer (ParseReplies reads it), and the
// commit: every rule is decided on its state as read, and only if no enforced rule denies
// does every rule that admitted write, so a denied request is charged nothing and a flood of
// denials writes nothing. Each algorithm's file gives its state layout, which records the
// parameters it was written under so that a changed configuration converts the key as
// package algorithms converts a state. A write sets the key's TTL to when it is back to full
// allowance (plus a second), so idle keys disappear.
//
// The clock is Redis' TIME, so every proxy decides on one clock whatever its own skew; Lua
// numbers are doubles, so absolute Unix-nanosecond timestamps are kept as (seconds,
// nanoseconds) pairs (lua/lib.lua). For the tests only, two more arguments replace TIME; the
// filter never sends them, and because keys are escaped a client cannot add them.
//
// # Least privilege
//
// The filter sends only EVALSHA and EVAL, and the script calls only TIME, HMGET, HSET,
// PEXPIRE, DEL, EXISTS, LLEN, LINDEX, LRANGE, LTRIM, LPUSH, RPUSH, ZCOUNT, ZADD and
// ZREMRANGEBYSCORE on the rate-limit keys: docs/global-limits.md gives the Redis ACL and the
// webdis configuration that allow no more (TestLeastPrivilege), and the Redis versions and
// sharding proxies tested.
package redis
