package filter

import (
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// deny sends the rule's local response. Only here is the rule's denied counter incremented,
// so every denial is counted exactly once.
func (h *httpContext) deny(rs *ruleState, d algorithms.Decision) types.Action {
	h.finished = true
	d = clampWaits(d, rs.maxWait)
	h.refundLeases()
	h.plugin.giveDecisions(h)
	rs.m.denied.Increment(1)
	r := rs.rule
	if h.plugin.cfg.FilterState {
		setFilterState(r.Name, stateDenied)
	}
	retry := ceilSeconds(int64(d.RetryAfter))
	grpc := isGrpcRequest()
	headers := make([][2]string, 0, 5+len(r.Deny.Headers))
	if !grpc {
		headers = append(headers, [2]string{"content-type", r.Deny.ContentType})
	}
	if r.Deny.EnvoyRateLimited {
		headers = append(headers, [2]string{"x-envoy-ratelimited", "true"})
	}
	if r.RateLimitHeaders != config.HeadersNone {
		if d.RetryAfter > 0 {
			headers = append(headers, [2]string{"retry-after", strconv.FormatInt(retry, 10)})
		}
		if rs.draft {
			policy := rs.policy
			if rs.adaptive != nil {
				policy = string(rs.appendAdaptivePolicy(nil))
			}
			headers = append(headers, [2]string{"ratelimit-policy", policy},
				[2]string{"ratelimit", string(appendRateLimitItemAfter([]byte(rs.item), d))})
		}
		if rs.legacy {
			headers = append(headers,
				[2]string{"x-ratelimit-limit", strconv.FormatInt(d.Limit, 10)},
				[2]string{"x-ratelimit-remaining", strconv.FormatInt(d.Remaining, 10)},
				[2]string{"x-ratelimit-reset", strconv.FormatInt(ceilSeconds(int64(d.ResetAfter)), 10)})
		}
	}
	for _, hd := range r.Deny.Headers {
		headers = append(headers, [2]string{hd.Name, hd.Value})
	}
	// A gRPC client reads grpc-status, not the HTTP status or a body: Envoy answers it with a
	// trailers-only response carrying the status given here, as its own rate-limit filters do.
	body, grpcStatus := []byte(nil), int32(-1)
	if grpc {
		grpcStatus = int32(r.Deny.GrpcStatus)
	} else {
		body = r.Deny.AppendBody(nil, r.Name, retry)
	}
	if err := abi.SendHttpResponse(uint32(r.Deny.Status), headers, body, grpcStatus); err != nil {
		abi.LogError("ratelimit: rule " + strconv.Quote(r.Name) + ": sending the local response: " + err.Error())
	}
	return types.ActionPause
}

// isGrpcRequest reports whether the request is gRPC by Envoy's own test (content-type exactly
// application/grpc, or that with a '+' suffix, Grpc::Common::hasGrpcContentType): Envoy
// ignores grpc_status for a request it does not take for gRPC.
func isGrpcRequest() bool {
	ct, err := abi.GetHttpRequestHeader("content-type")
	if err != nil || !strings.HasPrefix(ct, "application/grpc") {
		return false
	}
	rest := ct[len("application/grpc"):]
	return rest == "" || rest[0] == '+'
}

// failOpenOrClosed applies failure_mode after a recovered panic.
func (h *httpContext) failOpenOrClosed() types.Action {
	p := h.plugin
	h.finished = true
	if p.cfg != nil && p.cfg.FailureMode == config.FailDeny && len(p.rules) > 0 {
		rs := p.rules[0]
		if h.d != nil && len(h.d.applied) > 0 {
			rs = h.d.applied[0].rs
		}
		return h.deny(rs, failureDecision(rs))
	}
	return types.ActionContinue
}

// failureDecision is what a denial for failure_mode "deny", or after lost compare-and-swap
// races, reports: nothing left, try again in a second (the store may have recovered, the race
// is over by then). Its limit is the one in force: for an adaptive rule the limit its
// controller holds now (what RateLimit-Policy and ratelimit_adaptive_limit state), not max_limit.
func failureDecision(rs *ruleState) algorithms.Decision {
	limit := rs.rule.Algorithm.Limit
	if rs.adaptive != nil {
		limit = rs.adaptive.lim.limit
	}
	return algorithms.Decision{Limit: limit, RetryAfter: 1e9, ResetAfter: 1e9}
}

// showsHeaders reports whether the rule's decisions reach clients as rate-limit headers: an
// enforced rule's always, a shadow rule's only when it opts in (shadow_headers), since a
// client that honours them would slow down for a limit nobody enforces.
func (rs *ruleState) showsHeaders() bool { return !rs.rule.Shadow || rs.rule.ShadowHeaders }

// rateLimitHeaderNames are the rate-limit response headers, in order: draft, then legacy.
var rateLimitHeaderNames = [...]string{"ratelimit-policy", "ratelimit",
	"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}

// Bits of rateLimitHeaders.set: which of rateLimitHeaderNames are present.
const (
	draftHeaders  = 0b00011
	legacyHeaders = 0b11100
)

// rateLimitHeaders are the rate-limit headers of an allowed request, rendered when it is
// decided and added to its response. The values share one buffer, which the stream's context
// keeps for reuse (recycleContext): a steady stream of requests allocates nothing for them.
type rateLimitHeaders struct {
	values []byte
	ends   [len(rateLimitHeaderNames)]int32 // where each present header's value ends in values
	set    uint8                            // bit i: rateLimitHeaderNames[i] is present
}

// render renders the response headers of an allowed request into rh, in place (a copy would
// move a slice under the write barrier). The IETF draft fields list every rule that applied;
// the legacy X-RateLimit-* fields hold the most restrictive rule's.
func (rh *rateLimitHeaders) render(rules []applied) {
	buf := rh.values[:0]
	rh.ends, rh.set = [len(rateLimitHeaderNames)]int32{}, 0
	var tightest, draft *applied
	drafts := 0
	for i := range rules {
		a := &rules[i]
		rs := a.rs
		if !a.decided || !rs.showsHeaders() {
			continue
		}
		clampWaitsIn(&a.decision, rs.maxWait)
		if rs.draft {
			if drafts == 0 {
				buf = rs.appendPolicy(buf)
			} else {
				buf = rs.appendNextPolicy(buf)
			}
			draft = a
			drafts++
		}
		if rs.legacy && (tightest == nil || tighter(&a.decision, &tightest.decision)) {
			tightest = a
		}
	}
	if drafts > 0 {
		// The RateLimit items follow the policies: one rule's here, several rules' by a loop of
		// their own, which a request with one draft rule (the usual case) does not compile.
		rh.ends[0] = int32(len(buf))
		if drafts == 1 {
			// appendRateLimitItemAfter, written out: one function fewer for a first request.
			d := &draft.decision
			buf = strconv.AppendInt(append(buf, draft.rs.item...), d.Remaining, 10)
			buf = strconv.AppendInt(append(buf, ";t="...), ceilSeconds(int64(d.ResetAfter)), 10)
		} else {
			buf = appendRateLimitItems(buf, rules)
		}
		rh.ends[1] = int32(len(buf))
		rh.set |= draftHeaders
	}
	if tightest != nil {
		buf = rh.appendLegacy(buf, &tightest.decision)
	}
	rh.values = buf
}

// appendLegacy appends the legacy X-RateLimit-* values of d and marks them present (out of
// render's line, see doc.go: the default "draft" mode has none).
func (rh *rateLimitHeaders) appendLegacy(buf []byte, d *algorithms.Decision) []byte {
	// One call site for the three values, not three.
	legacy := [3]int64{d.Limit, d.Remaining, ceilSeconds(int64(d.ResetAfter))}
	for j, v := range legacy {
		buf = strconv.AppendInt(buf, v, 10)
		rh.ends[2+j] = int32(len(buf))
	}
	rh.set |= legacyHeaders
	return buf
}

// appendNextPolicy appends the rule's RateLimit-Policy item after another's (out of line, see
// doc.go: most requests show one rule's headers).
//
//go:noinline
func (rs *ruleState) appendNextPolicy(buf []byte) []byte {
	return rs.appendPolicy(append(buf, ", "...))
}

// appendRateLimitItems appends the RateLimit items of every decided draft rule that shows its
// headers, joined by ", " (render, for more than one such rule).
func appendRateLimitItems(buf []byte, rules []applied) []byte {
	n := 0
	for i := range rules {
		a := &rules[i]
		rs := a.rs
		if !a.decided || !rs.showsHeaders() || !rs.draft {
			continue
		}
		if n > 0 {
			buf = append(buf, ", "...)
		}
		buf = appendRateLimitItemAfter(append(buf, rs.item...), a.decision)
		n++
	}
	return buf
}

// logAddFailure logs a response header the host would not add (out of line, see doc.go).
func logAddFailure(name string, err error) {
	abi.LogDebug("ratelimit: adding response header " + name + ": " + err.Error())
}

// appendRateLimitItemAfter renders a RateLimit item after its name's `";r=`: the remaining
// quota and the seconds until it is fully available again.
func appendRateLimitItemAfter(dst []byte, d algorithms.Decision) []byte {
	dst = strconv.AppendInt(dst, d.Remaining, 10)
	return strconv.AppendInt(append(dst, ";t="...), ceilSeconds(int64(d.ResetAfter)), 10)
}

// ceilSeconds rounds nanoseconds up to whole seconds (a client told 0 while 300 ms remain
// would retry too early), bounded so that the rounding cannot overflow.
func ceilSeconds(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return (min(ns, algorithms.MaxExact) + 1e9 - 1) / 1e9
}

// The rate-limit response headers follow draft-ietf-httpapi-ratelimit-headers-11 (May 2026):
// RateLimit-Policy is a Structured Fields list of quota policy items, a String naming the
// policy with the parameters q (quota) and w (window in whole seconds), and RateLimit a list
// of service limit items, the same String with r (available quota) and t (seconds within
// which no more than r may be used). Rule names are [A-Za-z0-9_.-], so they never need
// escaping inside a String.

// policyRate returns the whole-number q and w (seconds) of a policy that admits limit events
// per window, with q/w exactly limit/window: rounding a sub-second window would advertise
// another rate (5 per 500ms as q=5;w=1 is half the real one). A window of whole seconds is
// stated as configured (q=100;w=60); otherwise w = window/g and q = limit*1s/g with
// g = gcd(limit*1s, window): 5 per 500ms is q=10;w=1, 7 per 1300ms is q=70;w=13.
func policyRate(limit int64, window time.Duration) (q, w int64) {
	limit = max(limit, 0)
	if window <= 0 {
		return limit, 1
	}
	if window%time.Second == 0 {
		return limit, int64(window / time.Second)
	}
	// limit <= algorithms.LimitCeiling (10^9) keeps limit * 10^9 inside an int64; a larger one
	// (never valid) is rounded to whole seconds rather than overflowed.
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
	dst = append(append(append(dst, '"'), name...), `";q=`...)
	return strconv.AppendInt(append(strconv.AppendInt(dst, q, 10), ";w="...), w, 10)
}

// policyItem renders the rule's RateLimit-Policy item for its configured limit.
func policyItem(r *config.Rule) string {
	return string(appendPolicyItem(nil, r.Name, r.Algorithm.Limit, r.Algorithm.Window))
}

// appendPolicy appends the rule's RateLimit-Policy item for the limit in force: for an
// adaptive rule the current limit (its maximum would mislead the client while it admits fewer).
func (rs *ruleState) appendPolicy(dst []byte) []byte {
	if rs.adaptive != nil {
		return rs.appendAdaptivePolicy(dst)
	}
	return append(dst, rs.policy...)
}

// appendAdaptivePolicy is appendPolicy for an adaptive rule (out of line, see doc.go).
//
//go:noinline
func (rs *ruleState) appendAdaptivePolicy(dst []byte) []byte {
	return appendPolicyItem(dst, rs.rule.Name, rs.adaptive.lim.limit, rs.rule.Algorithm.Window)
}

// maxWait returns the longest wait a decision of the rule can meaningfully report: the time
// the rule takes to restore its whole capacity plus one window, plus the longest shaping
// delay, at most algorithms.MaxExact. A longer wait comes from a corrupt answer or an overflow
// and is clamped, not rendered (a retry-after of 2^63-1 ns once gave "Retry-After: -9223372035").
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

// longerWait reports whether the denial a states a longer wait than the denial b, as the
// client would see them (each bounded by its rule's longest wait, see clampWaits).
func longerWait(a, b *applied) bool {
	return clampWaits(a.decision, a.rs.maxWait).RetryAfter > clampWaits(b.decision, b.rs.maxWait).RetryAfter
}

// clampWaits bounds a decision's durations to [0, limit] before they are rendered.
func clampWaits(d algorithms.Decision, limit time.Duration) algorithms.Decision {
	clampWaitsIn(&d, limit)
	return d
}

// clampWaitsIn is clampWaits in place, for render: a copy out and back would be code a VM's
// first request compiles.
func clampWaitsIn(d *algorithms.Decision, limit time.Duration) {
	d.RetryAfter = min(max(d.RetryAfter, 0), limit)
	d.ResetAfter = min(max(d.ResetAfter, 0), limit)
}
