package filter

import (
	"strconv"
	"strings"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// applied is one rule's outcome on the current request, kept for the response headers.
type applied struct {
	rs       *ruleState
	decision algorithms.Decision
}

type httpContext struct {
	types.DefaultHttpContext
	plugin *plugin
	id     uint32
	req    request

	// headers are the rate-limit headers to add to the upstream's response.
	headers [][2]string
}

// OnHttpRequestHeaders decides the request. Every rule is decided before any state is written
// (see the package comment), so a request one rule denies costs the other rules nothing.
func (h *httpContext) OnHttpRequestHeaders(int, bool) (action types.Action) {
	p := h.plugin
	defer recoverTo("OnHttpRequestHeaders", func() { action = h.failOpenOrClosed(nil) })
	h.req.reset()
	p.matched = p.cfg.Match(&h.req, p.matched[:0])
	if len(p.matched) == 0 {
		return types.ActionContinue
	}
	now := p.now()
	p.applied = p.applied[:0]

	// Phase 1: decide every rule, writing nothing.
	var denied *applied
	for _, r := range p.matched {
		rs := p.rules[r.Index]
		key, ok := r.AppendKey(p.key[:0], &h.req)
		p.key = key[:0]
		if !ok {
			rs.m.skipped.Increment(1)
			continue
		}
		pending := &p.pendings[r.Index]
		if err := rs.table.Decide(key, now, r.Cost(&h.req), pending); err != nil {
			p.storeFailure(rs, err)
			if p.cfg.FailureMode == config.FailDeny {
				return h.deny(rs, failureDecision(rs))
			}
			continue
		}
		p.applied = append(p.applied, applied{rs: rs, decision: pending.Decision})
		if !pending.Decision.Allowed && !r.Shadow {
			denied = &p.applied[len(p.applied)-1]
			break
		}
	}
	if denied != nil {
		return h.deny(denied.rs, denied.decision)
	}

	// Phase 2: write. A write that lost a race decides again on the fresh state; if that turns
	// into a denial, the rules already written keep their charge. That can only happen when
	// another worker took the last allowance between this request's read and its write, and it
	// errs on the side of the limit: it can over-count by one request, never admit one too many.
	for i := range p.applied {
		a := &p.applied[i]
		r := a.rs.rule
		pending := &p.pendings[r.Index]
		err := a.rs.table.Commit(pending)
		if pending.Retries > 0 {
			a.rs.m.casRetries.Increment(uint64(pending.Retries))
		}
		if pending.Overflow {
			a.rs.m.overflow.Increment(1)
		}
		if err != nil {
			p.storeFailure(a.rs, err)
			if p.cfg.FailureMode == config.FailDeny {
				return h.deny(a.rs, failureDecision(a.rs))
			}
			continue
		}
		a.decision = pending.Decision
		if !a.decision.Allowed {
			if r.Shadow {
				a.rs.m.shadowDenied.Increment(1)
				continue
			}
			return h.deny(a.rs, a.decision)
		}
		a.rs.m.allowed.Increment(1)
	}
	h.headers = appendRateLimitHeaders(h.headers[:0], p.applied)
	return types.ActionContinue
}

// failureDecision is what a denial for failure_mode "deny" reports: nothing left, try again in
// a second (the store may have recovered by then).
func failureDecision(rs *ruleState) algorithms.Decision {
	return algorithms.Decision{Limit: rs.rule.Limit, RetryAfter: 1e9, ResetAfter: 1e9}
}

// failOpenOrClosed applies failure_mode after a recovered panic.
func (h *httpContext) failOpenOrClosed(rs *ruleState) types.Action {
	p := h.plugin
	if p.cfg != nil && p.cfg.FailureMode == config.FailDeny && len(p.rules) > 0 {
		if rs == nil {
			rs = p.rules[0]
		}
		return h.deny(rs, failureDecision(rs))
	}
	return types.ActionContinue
}

// deny sends the rule's local response. The rule's denied counter is incremented here and only
// here, so every denial is counted exactly once.
func (h *httpContext) deny(rs *ruleState, d algorithms.Decision) types.Action {
	rs.m.denied.Increment(1)
	r := rs.rule
	retry := ceilSeconds(int64(d.RetryAfter))
	headers := make([][2]string, 0, 4+len(r.Deny.Headers))
	headers = append(headers, [2]string{"content-type", r.Deny.ContentType})
	if r.RateLimitHeaders != config.HeadersNone {
		if d.RetryAfter > 0 {
			headers = append(headers, [2]string{"retry-after", strconv.FormatInt(retry, 10)})
		}
		headers = appendRuleHeaders(headers, r.RateLimitHeaders, rs, d)
	}
	for _, hd := range r.Deny.Headers {
		headers = append(headers, [2]string{hd.Name, hd.Value})
	}
	body := r.Deny.AppendBody(nil, r.Name, retry)
	if err := abi.SendHttpResponse(uint32(r.Deny.Status), headers, body, -1); err != nil {
		abi.LogErrorf("ratelimit: rule %q: sending the local response: %v", r.Name, err)
	}
	return types.ActionPause
}

// OnHttpResponseHeaders adds the rate-limit headers decided on the request.
func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	defer recoverTo("OnHttpResponseHeaders", nil)
	for _, kv := range h.headers {
		if err := abi.AddHttpResponseHeader(kv[0], kv[1]); err != nil {
			abi.LogDebugf("ratelimit: adding response header %s: %v", kv[0], err)
		}
	}
	return types.ActionContinue
}

// appendRateLimitHeaders renders the response headers of an allowed request. The IETF draft
// fields list every rule that applied, as the draft allows several policies; the legacy
// X-RateLimit-* fields can hold one, so they describe the most restrictive rule (the one with
// the least remaining).
func appendRateLimitHeaders(dst [][2]string, rules []applied) [][2]string {
	var policies, limits []string
	var tightest *applied
	for i := range rules {
		a := &rules[i]
		mode := a.rs.rule.RateLimitHeaders
		if mode == config.HeadersDraft || mode == config.HeadersBoth {
			policies = append(policies, a.rs.policy)
			limits = append(limits, rateLimitItem(a.rs.rule.Name, a.decision))
		}
		if (mode == config.HeadersLegacy || mode == config.HeadersBoth) &&
			(tightest == nil || a.decision.Remaining < tightest.decision.Remaining) {
			tightest = a
		}
	}
	if len(policies) > 0 {
		dst = append(dst,
			[2]string{"ratelimit-policy", strings.Join(policies, ", ")},
			[2]string{"ratelimit", strings.Join(limits, ", ")})
	}
	if tightest != nil {
		dst = appendLegacy(dst, tightest.decision)
	}
	return dst
}

// appendRuleHeaders renders the rate-limit headers of one rule's decision (a denial).
func appendRuleHeaders(dst [][2]string, mode config.HeadersMode, rs *ruleState, d algorithms.Decision) [][2]string {
	if mode == config.HeadersDraft || mode == config.HeadersBoth {
		dst = append(dst,
			[2]string{"ratelimit-policy", rs.policy},
			[2]string{"ratelimit", rateLimitItem(rs.rule.Name, d)})
	}
	if mode == config.HeadersLegacy || mode == config.HeadersBoth {
		dst = appendLegacy(dst, d)
	}
	return dst
}

func appendLegacy(dst [][2]string, d algorithms.Decision) [][2]string {
	return append(dst,
		[2]string{"x-ratelimit-limit", strconv.FormatInt(d.Limit, 10)},
		[2]string{"x-ratelimit-remaining", strconv.FormatInt(d.Remaining, 10)},
		[2]string{"x-ratelimit-reset", strconv.FormatInt(ceilSeconds(int64(d.ResetAfter)), 10)})
}

// rateLimitItem renders one item of the IETF draft RateLimit field: remaining quota r and
// seconds t until the quota is fully available again.
func rateLimitItem(name string, d algorithms.Decision) string {
	return `"` + name + `";r=` + strconv.FormatInt(d.Remaining, 10) + ";t=" +
		strconv.FormatInt(ceilSeconds(int64(d.ResetAfter)), 10)
}

// ceilSeconds rounds nanoseconds up to whole seconds: a client told to wait 0 seconds while
// 300 ms remain would retry too early and be denied again.
func ceilSeconds(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return (ns + 1e9 - 1) / 1e9
}
