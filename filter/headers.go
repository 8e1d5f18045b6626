package filter

import (
	"strconv"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// The rate-limit response headers follow draft-ietf-httpapi-ratelimit-headers-11 (May 2026):
// RateLimit-Policy is a Structured Fields list of quota policy items, a String naming the
// policy with the parameters q (quota) and w (window in whole seconds), and RateLimit a list
// of service limit items, the same String with r (available quota) and t (seconds within
// which no more than r may be used). Rule names are [A-Za-z0-9_.-], so they never need
// escaping inside a String.

// policyRate returns the q and w of a policy that admits limit events per window: whole
// numbers, w in seconds, with q/w exactly limit/window. The draft's window has no sub-second
// precision, so rounding the window (or the quota) would advertise another rate: 5 per 500ms
// read as q=5;w=1 is half the real rate, and 3 per 1.5s read as q=3;w=1 more than the real one,
// so a client pacing itself to it is denied.
//
// A window of whole seconds is stated as configured (q=100;w=60 for 100 per minute): the quota
// per window is then exact and tells the client the window too. Otherwise w is the smallest
// whole number of seconds over which the rate admits a whole number of events: w = window / g
// and q = limit * 1s / g with g = gcd(limit * 1s, window), so 5 per 500ms is q=10;w=1, 3 per
// 1.5s is q=2;w=1 and 7 per 1300ms is q=70;w=13.
func policyRate(limit int64, window time.Duration) (q, w int64) {
	limit = max(limit, 0)
	if window <= 0 {
		return limit, 1
	}
	if window%time.Second == 0 {
		return limit, int64(window / time.Second)
	}
	// limit <= algorithms.LimitCeiling (10^9) keeps limit * 10^9 inside an int64; a larger
	// one cannot come from a valid configuration, and is rounded to whole seconds rather than
	// overflowed.
	if limit > algorithms.LimitCeiling {
		return limit, max(1, int64(window/time.Second))
	}
	a, b := limit*int64(time.Second), int64(window)
	g := algorithms.GCD(a, b)
	return a / g, b / g
}

// appendPolicyItem renders one quota policy item of the RateLimit-Policy field.
func appendPolicyItem(dst []byte, name string, limit int64, window time.Duration) []byte {
	q, w := policyRate(limit, window)
	dst = append(dst, '"')
	dst = append(dst, name...)
	dst = append(dst, `";q=`...)
	dst = strconv.AppendInt(dst, q, 10)
	dst = append(dst, ";w="...)
	return strconv.AppendInt(dst, w, 10)
}

// policyItem renders the rule's RateLimit-Policy item for its configured limit, once, at
// configure time.
func policyItem(r *config.Rule) string {
	return string(appendPolicyItem(nil, r.Name, r.Algorithm.Limit, r.Algorithm.Window))
}

// appendPolicy appends the rule's RateLimit-Policy item for the limit in force. A fixed
// limit's item is rendered once at configure time; an adaptive rule's limit moves with the
// upstream's health, and advertising its configured maximum while it admits fewer would
// mislead the client, so its item is rendered from the current limit, into the caller's
// buffer, without allocating.
func (rs *ruleState) appendPolicy(dst []byte) []byte {
	if rs.adaptive != nil {
		return rs.appendAdaptivePolicy(dst)
	}
	return append(dst, rs.policy...)
}

// appendAdaptivePolicy is appendPolicy for an adaptive rule. It is kept out of appendPolicy's
// line (see doc.go): a fixed limit's item needs none of the rendering.
//
//go:noinline
func (rs *ruleState) appendAdaptivePolicy(dst []byte) []byte {
	return appendPolicyItem(dst, rs.rule.Name, rs.adaptive.lim.limit, rs.rule.Algorithm.Window)
}

// policyString is appendPolicy for a denial's header list.
func (rs *ruleState) policyString() string {
	if rs.adaptive != nil {
		return string(rs.appendPolicy(nil))
	}
	return rs.policy
}

// maxWait returns the longest wait a decision of the rule can meaningfully report: the time
// the rule takes to restore its whole capacity (the window, times burst/limit when the burst
// is larger, and one window more), plus the longest shaping delay, and never more than algorithms.MaxExact, the
// bound the limiters keep every duration under. A longer wait comes from a corrupt or hostile
// answer or from an overflow, and is clamped, not rendered: a webdis answer with a retry-after
// of 2^63-1 ns once produced "Retry-After: -9223372035".
func maxWait(c algorithms.Config) time.Duration {
	limit := max(c.Limit, c.MinLimit, 1)
	capacity := max(c.Burst, c.Limit, c.MaxLimit, 1)
	// One window more than the capacity takes to refill, because a sliding window counter
	// weighs the previous window too.
	windows := (capacity+limit-1)/limit + 1
	w := min(c.Window, algorithms.MaxWindow)
	if w <= 0 || windows > algorithms.MaxExact/int64(w) {
		return algorithms.MaxExact
	}
	return min(time.Duration(windows)*w+max(c.MaxDelay, 0), algorithms.MaxExact)
}

// clampWaits bounds a decision's durations to [0, limit] before they are rendered.
func clampWaits(d algorithms.Decision, limit time.Duration) algorithms.Decision {
	clampWaitsIn(&d, limit)
	return d
}

// clampWaitsIn is clampWaits on the decision in place: render bounds each rule's decision where
// it lies, because a copy of the whole decision out and back would be code of its own, which
// V8 in Envoy compiles on a VM's first request.
func clampWaitsIn(d *algorithms.Decision, limit time.Duration) {
	d.RetryAfter = min(max(d.RetryAfter, 0), limit)
	d.ResetAfter = min(max(d.ResetAfter, 0), limit)
}
