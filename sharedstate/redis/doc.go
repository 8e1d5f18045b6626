// Package redis is the Redis side of global rate limits: the Lua script that keeps the rules'
// state in Redis, the encoding of one call as a webdis request, and the decoding of the answer.
// It does no I/O: the filter sends the request as an Envoy HTTP callout and hands the answer to
// ParseReplies, so the package compiles for wasip1 and costs no allocation per call once the
// caller reuses its buffers.
//
// # Why webdis, and what it takes
//
// Envoy lets a filter reach the outside only through HTTP callouts, so Redis is reached
// through webdis, an HTTP front for Redis. All of one request's global rules are one callout:
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
//   - passes raw spaces, tabs, CR, LF, NUL, '{', '}', ':' and non-UTF-8 bytes to Redis
//     unchanged;
//   - treats an all-digit first component as a database number ("1/SET/k/v" runs in DB 1);
//   - sends an empty argument for an empty component, also a trailing one ("SET/k/");
//   - drops strings that are not valid UTF-8 from JSON answers: an array element vanishes,
//     an error message becomes [false];
//   - ignores the Content-Type; answers 403 to an empty body.
//
// Escape therefore percent-encodes every byte outside [A-Za-z0-9_-]: nothing in a
// request-derived key can add arguments (which could override the rule's limit), truncate the
// command or change the reply format. Numbers are decimal digits and '-', which need none.
//
// Scripts must return flat arrays of integers: webdis turns a nested table into null, and
// Redis truncates Lua numbers to integers.
//
// # Keys and partitions
//
// docs/global-limits.md gives the key layouts (AppendKey, AppendPartKey), what the number of
// partitions costs, the partition secret (AppendSecretKey, AppendSecretCall, lua/secret.lua),
// the Redis ACL and webdis configuration that allow no more than the filter sends
// (TestLeastPrivilege), and the versions and sharding proxies tested. With P > 1 partitions
// the filter sends one call per global rule, and each commits on its own: a request denied by
// one rule may have been charged by the others (at most one request over-counted per other
// rule, never an extra admission).
//
// # The script
//
// One script decides (lua/*.lua but secret.lua, concatenated): functions per algorithm with a
// global mode and a main part that runs a call. Each algorithm is a line-by-line port of the
// arithmetic documented on its type in package algorithms; differential tests against a real
// redis-server demand the same decisions and stored states from both.
//
// lua/main.lua's header is the call's specification: its keys, the ten integers per rule
// (AppendEvalSHA), the flat answer (ParseReplies), and the commit: only if no enforced rule
// denies does every rule that admitted write, so a denied request is charged nothing. A write
// sets the key's TTL to when it is back to full allowance (plus a second).
//
// The clock is Redis' TIME, so every proxy decides on one clock, kept as (seconds, nanoseconds)
// pairs (lua/lib.lua). For the tests only, two more arguments replace TIME; because keys are
// escaped, a client cannot add them.
package redis
