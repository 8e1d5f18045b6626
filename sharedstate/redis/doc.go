// Package redis is the Redis side of global rate limits: the Lua scripts that keep a rule's
// state in Redis, the encoding of one decision as a webdis request, and the decoding of the
// answer. It does no I/O: the filter sends the request as an Envoy HTTP callout and hands the
// answer to ParseReply, so the package compiles for wasip1 and costs no allocation per
// decision once the caller reuses its buffers.
//
// # Why webdis, and what it takes
//
// Envoy lets a filter reach the outside only through HTTP callouts to configured clusters, so
// Redis is reached through webdis, an HTTP front for Redis. One decision is one callout:
//
//	:method POST   :path /   content-type application/x-www-form-urlencoded
//	body  EVALSHA/<sha1>/1/<escaped key>/<n>/<config args...>
//
// webdis splits the body at '/', percent-decodes each argument and sends the command to Redis;
// the JSON answer is {"EVALSHA":[...]}. webdis answers 200 also for Redis errors
// ({"EVALSHA":[false,"ERR ..."]}), 503 when it cannot reach Redis, and 403 for a command its
// ACL forbids. MULTI/EXEC/WATCH are refused, so every decision is one Lua script, which Redis
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
// # Keys
//
// AppendKey builds <prefix>:{<rule>}:<descriptor>, with the rule as the Redis Cluster hash
// tag, and hashes long or binary descriptors; see AppendKey.
//
// # Scripts, time and state
//
// There is one script per algorithm with a global mode (token_bucket, leaky_bucket meter,
// sliding_window counter and log, fixed_window, gcra); adaptive and the leaky-bucket shaper
// are local only. Each script is a line-by-line port of the arithmetic documented on the
// algorithm's type in package algorithms, and a differential test against a real
// redis-server demands identical decisions from both on random sequences.
//
// The clock is Redis' TIME, so every proxy decides on one clock whatever its own skew. Lua
// numbers are doubles, exact only up to 2^53, so absolute Unix-nanosecond timestamps are
// stored as their exact decimal string and handled as (seconds, nanoseconds) pairs; only
// differences below 2^53 ns (104 days) are ever needed as plain numbers (see lua/lib.lua).
//
// State layouts (every hash carries v, the Go version byte in decimal; a key of another
// version or Redis type is a fresh key, as an unknown version byte is in Go):
//
//	token_bucket            hash  v=17 t=<tokens, 1/wg units> l=<last, Unix ns>
//	leaky_bucket (meter)    hash  v=33 lv=<level, 1/wg units> l=<last, Unix ns>
//	sliding_window counter  hash  v=49 ws=<window start, Unix ns> p=<prev> c=<cur>
//	sliding_window log      list  <Unix ns> per admitted event, oldest first
//	fixed_window            hash  v=81 ws=<window start, Unix ns> c=<count>
//	gcra                    hash  v=97 tat=<theoretical arrival time, Unix ns>
//
// Arguments after the key are n and the configuration, rendered once by NewRule:
//
//	token_bucket, leaky_bucket   n limit capacity lg wg      (g = gcd(limit, window ns),
//	                                                          lg = limit/g, wg = window ns/g)
//	sliding_window, fixed_window n limit window_ms
//	gcra                         n limit burst emission_interval_ns
//
// Every script answers the flat array
//
//	{allowed (0|1), limit, remaining, retry_after_ns, reset_after_ns, now_s, now_ns}
//
// A script writes only when it admits: it stores the new state and sets the key's TTL to
// reset_after (the time until the key is back to its full allowance) rounded up to whole
// milliseconds plus one second, so idle keys disappear and an expired key reads as exactly
// the fresh state it had reached. A denial changes nothing.
//
// For the tests only, two more arguments (Unix seconds and nanoseconds) replace TIME, so long
// spans and time going backwards can be tested deterministically. The filter never sends
// them, and because keys are escaped a client cannot add them.
//
// # Recommended webdis and Redis setup
//
// The filter sends only EVALSHA and EVAL, and the scripts call only TIME, HMGET, HSET, PEXPIRE,
// DEL, LLEN, LINDEX, LRANGE, LTRIM, LPUSH and RPUSH on the rate-limit keys. EVAL runs any Lua, so a
// webdis ACL alone does not contain whoever can reach the webdis cluster: restrict the Redis
// user webdis logs in as too (Redis >= 6 checks the commands a script calls against the
// caller's ACL). This setup is tested (TestLeastPrivilege), with ~rl:* matching the key prefix:
//
//	redis.conf   user default on >SECRET resetkeys ~rl:* resetchannels -@all +evalsha +eval
//	             +time +hmget +hset +pexpire +del +llen +lindex +lrange +ltrim +lpush +rpush
//	             (one line)
//	webdis.json  "redis_auth": "SECRET",
//	             "acl": [{"disabled": ["*"]}, {"enabled": ["EVALSHA", "EVAL"]}]
//
// Operators who load the scripts ahead of time (SCRIPT LOAD, see Scripts) can leave EVAL out of
// both lists; a NOSCRIPT fallback then fails (webdis answers 403, ErrMalformed) until the
// scripts are loaded again after a Redis restart.
//
// Redis versions: tested with 7.0.15. The scripts need multi-field HSET (Redis >= 4.0) and
// effects replication to write after reading TIME, the default since Redis 5 (the scripts
// switch it on themselves on older servers). webdis talks to one Redis node; the hash tag in
// the keys keeps every script on one slot should a cluster-aware front ever be used.
package redis
