package filter

import (
	"strconv"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// decideRequest is OnHttpRequestHeaders without its deferred recover, which the compiler would
// write out at each of its many returns (see doc.go).
func (h *httpContext) decideRequest() types.Action {
	p := h.plugin
	req := &p.req
	req.reset()
	// Removing the shadow rules' request headers makes the filter read the header map again:
	// each header's lines are then kept as first answered (see request.lines).
	req.keepLines = len(p.shadowHeaders) > 0
	p.skipped = p.skipped[:0]
	p.matched = p.cfg.MatchSkipped(req, p.matched[:0], &p.skipped)
	if len(p.skipped) > 0 {
		p.countSkipped()
	}
	if len(p.shadowHeaders) > 0 {
		p.removeShadowHeaders()
	}
	if len(p.matched) == 0 {
		return types.ActionContinue
	}
	// A matched rule whose key header (or query parameter) the request repeats under
	// on_duplicate "reject" refuses it before any rule is decided (duplicateKeyHeader). With
	// one matched rule, its key fails for such a request and decideFrom checks it; with
	// several, every rule is checked here first.
	if len(p.matched) > 1 && h.refuseDuplicateKeyHeader() {
		return types.ActionPause
	}
	now := p.now()
	h.startedAt = now
	h.d = p.takeDecisions()

	// Phase 1: decide every local rule, writing nothing. This loop serves the common case
	// (local, with a key, no overrides, lease, enforce_percent or usage); at the first rule
	// that needs more it hands the rest to decideFrom, so that a VM's first request of a plain
	// configuration compiles this loop alone (see doc.go).
	var key []byte
	var ok bool
	var built *config.Rule // the rule key was built for
	for i, r := range p.matched {
		rs := p.rules[r.Index]
		// Rules with the same key parts (one client over several windows) share the key built
		// for the previous one: building it costs about a microsecond in a Wasm VM.
		if built == nil || !r.SameKey(built) {
			key, ok = r.AppendKey(p.key[:0], req)
			p.key, built = key[:0], r
		}
		if !ok || len(key) > p.cfg.MaxKeyBytes || rs.general {
			return h.decideFrom(i, now, key, ok, built)
		}
		a := h.d.add(rs)
		a.cost = r.Cost(req)
		if h.decideShared(a, key, now, a.cost) {
			return h.denyLocal(i, now, key, built)
		}
	}
	return h.finish()
}

// decideFrom is phase 1 of decideRequest from its i-th matched rule on, for every kind of
// rule; key, ok and built are decideRequest's key state on arrival.
func (h *httpContext) decideFrom(i int, now int64, key []byte, ok bool, built *config.Rule) types.Action {
	p := h.plugin
	req := &p.req
	globals := 0
	for j, r := range p.matched[i:] {
		rs := p.rules[r.Index]
		if built == nil || !r.SameKey(built) {
			key, ok = r.AppendKey(p.key[:0], req)
			p.key, built = key[:0], r
		}
		if !ok {
			// A single matched rule's repeated key part is refused here, before anything is
			// decided or counted: the working set goes back unused.
			if len(p.matched) == 1 && r.RepeatsKeyPart(req) && h.duplicateKeyHeader(r) {
				p.giveDecisions(h)
				return types.ActionPause
			}
			rs.noKey(r, req)
			continue
		}
		if len(key) > p.cfg.MaxKeyBytes {
			if h.keyTooLong(r, len(key)) {
				return types.ActionPause
			}
			continue
		}
		if rs.unenforced != nil {
			rs = p.enforcing(rs)
		}
		if rs.overrides != nil {
			if rs = rs.overrideFor(r, key); rs == nil {
				continue // an unlimited override: the rule lets the request through untouched
			}
		}
		a := h.d.add(rs)
		a.cost = r.Cost(req)
		if r.Scope == config.ScopeGlobal {
			action, denied, callout := h.prepareGlobal(a, r, key, now)
			if denied {
				return action
			}
			if callout {
				globals++
			}
			continue
		}
		if rs.usage != nil {
			a.keepKey(key) // for the settlement (see usage.go)
		}
		if h.decideLocal(a, key, now, a.cost) {
			return h.denyLocal(i+j, now, key, built)
		}
	}
	if globals == 0 {
		return h.finish()
	}
	return h.decideGlobal(now)
}

// denyLocal denies the request that a local rule denied in phase 1: that rule is the last of
// h.d.applied, p.matched[i] the rule it applies for, key the key built for the rule built.
// Every later enforced local rule is decided too, without writing, so that the response states
// the longest wait among the denying rules. Global rules are not asked: a request a local rule
// denies sends no Redis call.
func (h *httpContext) denyLocal(i int, now int64, key []byte, built *config.Rule) types.Action {
	p := h.plugin
	req := &p.req
	ok := true
	longest := len(h.d.applied) - 1
	for _, r := range p.matched[i+1:] {
		if r.Scope == config.ScopeGlobal || r.Shadow {
			continue
		}
		if !r.SameKey(built) {
			key, ok = r.AppendKey(p.key[:0], req)
			p.key, built = key[:0], r
		}
		if !ok || len(key) > p.cfg.MaxKeyBytes {
			continue // refused as too long when its rule's turn comes
		}
		rs := p.rules[r.Index]
		if rs.unenforced != nil && p.enforcing(rs) != rs {
			continue // a denial the rule does not enforce on this request states no wait
		}
		if rs.overrides != nil {
			if rs = rs.overrideFor(r, key); rs == nil {
				continue
			}
		}
		a := h.d.add(rs)
		a.cost = r.Cost(req)
		if rs.table.Decide(key, now, a.cost, &a.pending) != nil {
			continue // contention or a store failure: the rule states no wait of its own
		}
		a.decision = a.pending.Decision
		if !a.decision.Allowed && longerWait(a, &h.d.applied[longest]) {
			longest = len(h.d.applied) - 1
		}
	}
	a := &h.d.applied[longest]
	return h.deny(a.rs, a.decision)
}

// The functions below are the parts of OnHttpRequestHeaders that only some configurations
// or a rare path need, each out of line (see doc.go).

// removeShadowHeaders removes the shadow rules' request headers from the request.
func (p *plugin) removeShadowHeaders() {
	for _, name := range p.shadowHeaders {
		// A client's own copy would read to the upstream as a shadow rule's verdict.
		if err := abi.RemoveHttpRequestHeader(name); err != nil {
			abi.LogDebug("ratelimit: removing request header " + name + ": " + err.Error())
		}
	}
	// A header map read while matching still holds the client's copies: a header first read
	// from now on must be the request as it now is, as a host call would answer.
	p.req.forgetHeaderMap()
}

// countSkipped counts the rules whose conditions held but whose key the request lacks
// (config.Config.MatchSkipped).
//
//go:noinline
func (p *plugin) countSkipped() {
	for _, r := range p.skipped {
		p.rules[r.Index].m.skipped.Increment(1)
	}
}

// noKey counts a matched rule that has no key for the request (skipped). A shadow rule's
// repeated key header or query parameter was counted once already, in duplicate_header.
func (rs *ruleState) noKey(r *config.Rule, req *request) {
	if _, dup := r.DuplicatePart(req); !dup || !r.Shadow {
		rs.m.skipped.Increment(1)
	}
}

// overrideFor returns the state of the override of rs that key selects, rs itself when none
// does, or nil for an unlimited override (counted as allowed by the rule).
func (rs *ruleState) overrideFor(r *config.Rule, key []byte) *ruleState {
	j := r.OverrideFor(key)
	if j < 0 {
		return rs
	}
	if rs.overrides[j] == nil {
		rs.m.allowed.Increment(1)
		return nil
	}
	return rs.overrides[j]
}

// refuseDuplicateKeyHeader asks duplicateKeyHeader about each of several matched rules that
// repeats a key part, and reports whether one refused the request.
func (h *httpContext) refuseDuplicateKeyHeader() bool {
	p := h.plugin
	for _, r := range p.matched {
		if r.RepeatsKeyPart(&p.req) && h.duplicateKeyHeader(r) {
			return true
		}
	}
	return false
}

// duplicateKeyHeader answers 400 when the matched rule r keys on a header or query parameter
// the request carries more than once, with on_duplicate "reject" (config.Rule.DuplicatePart),
// before any rule is decided, and reports whether it did. Such a request has no unambiguous
// key: the filter would count one value while the upstream may read another, and a client
// rotating the counted one would never reach its limit. A shadow rule only counts it (in
// duplicate_header) and skips it, as a request without its key header.
func (h *httpContext) duplicateKeyHeader(r *config.Rule) (refused bool) {
	kp, dup := r.DuplicatePart(&h.plugin.req)
	if !dup {
		return false
	}
	rs := h.plugin.rules[r.Index]
	rs.m.duplicateHeader.Increment(1)
	if r.Shadow {
		return false
	}
	h.finished = true
	errName, field, what := "duplicate_header", "header", " header"
	if kp.Source == config.SourceQuery {
		errName, field, what = "duplicate_query_parameter", "parameter", " query parameter"
	}
	body := []byte(`{"error":"` + errName + `","rule":"` + r.Name + `","` + field + `":"` + kp.Name +
		`","message":"the request carries the ` + kp.Name + what + ` more than once; send it once"}`)
	headers := [][2]string{{"content-type", "application/json"}}
	if err := abi.SendHttpResponse(400, headers, body, -1); err != nil {
		abi.LogError("ratelimit: rule " + strconv.Quote(r.Name) + ": sending the local response: " + err.Error())
	}
	return true
}

// keyTooLong answers 431 for a request whose key for the matched rule r is n bytes, longer
// than max_key_bytes, and reports whether it did; a shadow rule only counts and skips it.
// Refusing bounds what a key costs: a prefix of the value would merge every client sharing it
// (bearer tokens of one issuer), and a hash of it costs time in its length (SipHash of 60 KiB
// takes about 40 us in a Wasm VM).
func (h *httpContext) keyTooLong(r *config.Rule, n int) (refused bool) {
	p := h.plugin
	p.rules[r.Index].m.keyTooLong.Increment(1)
	if r.Shadow {
		return false
	}
	h.finished = true
	h.refundLeases()
	p.giveDecisions(h)
	limit := strconv.Itoa(p.cfg.MaxKeyBytes)
	body := []byte(`{"error":"key_too_long","rule":"` + r.Name + `","max_key_bytes":` + limit +
		`,"message":"the request's key for this rule is ` + strconv.Itoa(n) + ` bytes, more than ` + limit +
		`; send shorter key headers or parameters"}`)
	headers := [][2]string{{"content-type", "application/json"}}
	if err := abi.SendHttpResponse(431, headers, body, -1); err != nil {
		abi.LogError("ratelimit: rule " + strconv.Quote(r.Name) + ": sending the local response: " + err.Error())
	}
	return true
}
