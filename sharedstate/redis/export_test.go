package redis

import "strconv"

// The helpers below serve the tests only.

// Bounded returns the rule with a key bound: at most maxKeys live keys in Redis (keys that
// have not expired), tracked in the rule's key set <prefix>:{<domain>}:<name>:#keys. A request
// whose key does not exist while the rule has maxKeys live keys is decided on the rule's
// overflow key <prefix>:{<domain>}:<name>:#overflow instead, so a flood of new keys is limited
// together as one client and memory stays bounded, while no active client's key is evicted
// (and so reset). prefix, domain and name must be those the rule's keys are built with (see
// AppendKey). maxKeys <= 0 returns r unchanged. It is Partitioned with one partition.
func (r *Rule) Bounded(maxKeys int64, prefix, domain, name string) *Rule {
	return r.Partitioned(1, maxKeys, prefix, domain, name)
}

// AppendRuleKey appends one of a rule's own keys (suffix "#keys" or "#overflow").
var AppendRuleKey = appendRuleKey

// Partitions returns the number of hash tags the rule's keys are spread over (1: the
// domain's).
func (r *Rule) Partitions() int { return max(r.parts, 1) }

// MaxKeys returns the rule's key bound (0: unbounded).
func (r *Rule) MaxKeys() int64 { return r.bound }

// Script returns the script every rule runs.
func (r *Rule) Script() *Script { return script() }

// Limit returns the configured limit, which every reply for this rule carries; ParseReplies
// compares the two to detect a reply meant for another request.
func (r *Rule) Limit() int64 { return r.limit }

// appendNow appends the test-only clock override (two more arguments: Unix seconds and
// nanoseconds) to a body made by AppendEvalSHA or AppendEval. The filter never sends it: the
// scripts then use Redis' TIME, one clock for all proxies.
func appendNow(dst []byte, now int64) []byte {
	if now < 0 {
		now = 0
	}
	dst = append(dst, '/')
	dst = strconv.AppendInt(dst, now/1e9, 10)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, now%1e9, 10)
}

// AppendEvalSHAAt is AppendEvalSHA with the test-only clock override: the script decides at
// now (Unix ns) instead of Redis' TIME. It exists only in test builds.
func (r *Rule) AppendEvalSHAAt(dst, key []byte, n, now int64) []byte {
	return appendNow(r.AppendEvalSHA(dst, key, n), now)
}

// AppendEvalAt is AppendEval with the test-only clock override.
func (r *Rule) AppendEvalAt(dst, key []byte, n, now int64) []byte {
	return appendNow(r.AppendEval(dst, key, n), now)
}

// AppendEvalSHAItemsAt is the function AppendEvalSHA with the test-only clock override.
func AppendEvalSHAItemsAt(dst []byte, items []Item, now int64) []byte {
	return appendNow(AppendEvalSHA(dst, items), now)
}

// AppendSettleSHAAt is AppendSettleSHA with the test-only clock override.
func AppendSettleSHAAt(dst []byte, s *Settlement, now int64) []byte {
	return appendNow(AppendSettleSHA(dst, s), now)
}
