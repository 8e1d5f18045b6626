package redis

import (
	"strconv"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

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
func AppendRuleKey(dst []byte, prefix, domain, rule string, partitions, part int, suffix string) []byte {
	return append(appendHead(dst, prefix, domain, rule, partitions, part), suffix...)
}

// Partitions returns the number of hash tags the rule's keys are spread over (1: the
// domain's).
func (r *Rule) Partitions() int { return max(r.parts, 1) }

// MaxKeys returns the rule's key bound (0: unbounded).
func (r *Rule) MaxKeys() int64 { return r.bound }

// Script returns the script every rule runs.
func (r *Rule) Script() *Script { return &ratelimitScript }

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
	return appendNow(AppendEvalSHA(dst, TestCallID, items), now)
}

// AppendSettleSHAAt is AppendSettleSHA with the test-only clock override.
func AppendSettleSHAAt(dst []byte, s *Settlement, now int64) []byte {
	return appendNow(AppendSettleSHA(dst, s), now)
}

// Reply is one decoded answer of a call with one rule (see ParseReply).
type Reply struct {
	// Decision is the limiter's decision, field for field what the Go limiter of the same
	// configuration decides at Now. Delay is always 0 (there is no global shaper).
	Decision algorithms.Decision
	// Now is the instant of the decision on Redis' clock, in Unix nanoseconds (microsecond
	// resolution, from TIME).
	Now int64
}

// ParseReply decodes the answer to a call with one rule (Rule.AppendEvalSHA or
// Rule.AppendEval), which has to be an enforced rule; see ParseReplies.
func ParseReply(status int, body []byte) (Reply, error) {
	var a [1]Answer
	items := [1]Item{{Rule: anyRule}}
	now, _, err := ParseReplies(status, body, TestCallID, items[:], a[:])
	if err != nil {
		return Reply{}, err
	}
	return Reply{Decision: a[0].Decision, Now: now}, nil
}

// anyRule stands for the rule of a ParseReply call: its limit of 0 matches any reply's.
var anyRule = &Rule{}

// AppendEvalSHA appends the body of a call with this rule alone (not a shadow rule) on key
// for n events; see the function AppendEvalSHA.
func (r *Rule) AppendEvalSHA(dst, key []byte, n int64) []byte {
	items := [1]Item{{Rule: r, Key: key, N: n}}
	return AppendEvalSHA(dst, TestCallID, items[:])
}

// AppendEval appends the NOSCRIPT fallback of Rule.AppendEvalSHA.
func (r *Rule) AppendEval(dst, key []byte, n int64) []byte {
	items := [1]Item{{Rule: r, Key: key, N: n}}
	return AppendEval(dst, TestCallID, items[:])
}

// ParseRepliesGeneral is the parser ParseReplies leaves every answer it does not decode itself to.
var ParseRepliesGeneral = parseReplies

// TestCallID is the call id of the bodies the tests build: the largest, so that every call
// checks the script echoes an id at the edge of a double's exact integers.
const TestCallID = MaxCallID
