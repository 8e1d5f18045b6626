package filter

import (
	"errors"
	"strconv"
	"strings"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// applied is one rule's part in the current request.
type applied struct {
	rs       *ruleState
	decision algorithms.Decision
	// decided is false while a global rule waits for Redis, and for a rule whose state could
	// not be read under failure_mode "allow" (it then adds no headers).
	decided bool
	// local is set when the decision was made on this proxy's shared data and still has to
	// be written (see Table.Commit).
	local   bool
	pending sharedstate.Pending
	// key is the rule's descriptor, kept for a global rule until Redis has answered.
	key  []byte
	cost int64
	// leased is the VM lease that admitted the request (given back if another rule denies
	// it); take is the size of a lease take in flight, 0 for an exact decision. spent is set
	// when a global rule's lease admitted the request: the rule then has no part in the
	// request's Redis call (see inCall).
	leased *heldLease
	take   int64
	spent  bool
	// sentAt is when this rule's own call was sent, with redis.partitions > 1 (one call per
	// rule); the request's single call uses decisions.sentAt.
	sentAt int64
}

// decisions is the per-request working set. It is taken from the plugin's free list and given
// back when the request is decided, so that a steady stream of requests allocates nothing for
// it; a request paused on a Redis callout keeps its own set until the answer arrives.
type decisions struct {
	applied     []applied
	outstanding int
	// sentAt is when the request's Redis callout was sent; retried is set once it has been
	// resent with the script source after Redis answered NOSCRIPT.
	sentAt  int64
	retried bool
}

type httpContext struct {
	types.DefaultHttpContext
	plugin *plugin
	id     uint32
	d      *decisions

	// headers are the rate-limit headers to add to the upstream's response.
	headers rateLimitHeaders
	// finished is set once the request has been let through or denied; done once the stream
	// is gone. A late callout answer for either decides nothing for the request (it still
	// feeds the VM's leases, the latency histogram and the breaker: lateAnswer).
	finished, done bool
	// queued is set while a shaping rule holds the request in the plugin's queue.
	queued bool
	// calledOut is set once a callout was dispatched (or tried) for the stream: its callback
	// holds the context, and may run after the stream ended, so the context is never reused.
	calledOut bool

	// observed lists the adaptive rules that admitted the request; its outcome feeds them.
	observed               []*ruleState
	startedAt, respondedAt int64
	status                 int
}

// OnHttpRequestHeaders decides the request. Every rule is decided before any state is written
// (see the package comment), so a request one rule denies costs the other rules nothing.
func (h *httpContext) OnHttpRequestHeaders(int, bool) (action types.Action) {
	defer recoverTo("OnHttpRequestHeaders", func() { action = h.failOpenOrClosed() })
	return h.decideRequest()
}

// decideRequest is OnHttpRequestHeaders without its deferred recover. The compiler writes the
// deferred call out at every return of a function that defers one, and deciding has many
// returns: kept apart, the recover is written once, which keeps the code a VM's first request
// compiles smaller (see doc.go).
func (h *httpContext) decideRequest() types.Action {
	p := h.plugin
	req := &p.req
	req.reset()
	// Removing the shadow rules' request headers makes the filter read the header map again:
	// each header's lines are then kept as first answered (see request.lines).
	req.keepLines = len(p.shadowHeaders) > 0
	p.matched = p.cfg.Match(req, p.matched[:0])
	if len(p.shadowHeaders) > 0 {
		p.removeShadowHeaders()
	}
	if len(p.matched) == 0 {
		return types.ActionContinue
	}
	// A matched rule whose key header (or query parameter) the request repeats under
	// on_duplicate "reject" refuses it (see duplicateKeyHeader), before any rule is decided.
	// With one matched rule (the usual case) the rule's key, built first thing below, fails
	// for exactly such a request, and decideFrom then checks it; with several, every rule
	// is checked here first, out of line.
	if len(p.matched) > 1 && h.refuseDuplicateKeyHeader() {
		return types.ActionPause
	}
	now := p.now()
	h.startedAt = now
	h.d = p.takeDecisions()

	// Phase 1: decide every local rule, writing nothing. This loop serves the rules of the
	// common case (local, without overrides or a lease block, with a key); at the first rule
	// that needs more it hands the rest of the request to decideFrom, so that a VM's first
	// request of a plain configuration compiles this loop alone, not the branches of the
	// others (see doc.go).
	var key []byte
	var ok bool
	var built *config.Rule // the rule key was built for
	for i, r := range p.matched {
		rs := p.rules[r.Index]
		// Rules with the same key parts (one client limited over several windows) share
		// the key built for the previous one: building it costs about a microsecond in a
		// Wasm VM.
		if built == nil || !r.SameKey(built) {
			key, ok = r.AppendKey(p.key[:0], req)
			p.key, built = key[:0], r
		}
		if !ok || rs.overrides != nil || rs.lease != nil || r.Scope == config.ScopeGlobal {
			return h.decideFrom(i, now, key, ok, built)
		}
		a := h.d.add(rs)
		a.cost = r.Cost(req)
		if h.decideShared(a, key, now, a.cost) {
			return h.deny(a.rs, a.decision)
		}
	}
	return h.finish()
}

// decideFrom is phase 1 of decideRequest from its i-th matched rule on, for every kind of
// rule: a rule without its key, an override, a lease block, a global rule (collected for the
// request's Redis call). key, ok and built are decideRequest's key state on arrival (the key
// built for the rule built, and whether it was). It is kept out of line for the reason given
// in decideRequest.
//
//go:noinline
func (h *httpContext) decideFrom(i int, now int64, key []byte, ok bool, built *config.Rule) types.Action {
	p := h.plugin
	req := &p.req
	globals := 0
	for _, r := range p.matched[i:] {
		rs := p.rules[r.Index]
		if built == nil || !r.SameKey(built) {
			key, ok = r.AppendKey(p.key[:0], req)
			p.key, built = key[:0], r
		}
		if !ok {
			// A single matched rule's repeated key part is refused here (decideRequest
			// checks several rules before deciding any). Nothing has been decided or
			// counted yet: the request's working set goes back unused.
			if len(p.matched) == 1 && r.RepeatsKeyPart(req) && h.duplicateKeyHeader(r) {
				p.giveDecisions(h)
				return types.ActionPause
			}
			rs.noKey(r, req)
			continue
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
		if h.decideLocal(a, key, now, a.cost) {
			return h.deny(a.rs, a.decision)
		}
	}
	if globals == 0 {
		return h.finish()
	}
	return h.decideGlobal(now)
}

// The functions below are the parts of OnHttpRequestHeaders that a request needs only for
// some configurations (shadow request headers, overrides, global rules) or on a rare path (a
// rule without its key). Each is a function of its own, kept out of line (see doc.go): kept
// inline they would be compiled with OnHttpRequestHeaders on every VM's first request,
// whether its rules use them or not.

// removeShadowHeaders removes the shadow rules' request headers from the request.
//
//go:noinline
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

// noKey counts a matched rule that has no key for the request (skipped). A shadow rule's
// repeated key header or query parameter was counted once already, in duplicate_header.
//
//go:noinline
func (rs *ruleState) noKey(r *config.Rule, req *request) {
	if _, dup := r.DuplicatePart(req); !dup || !r.Shadow {
		rs.m.skipped.Increment(1)
	}
}

// overrideFor returns the state of the override of rs that key selects, rs itself when none
// does, or nil for an unlimited override (the request is then counted as allowed by the rule).
//
//go:noinline
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

// prepareGlobal prepares the part a of the matched global rule r in the request. It reports
// denied, with the action to return, when the rule's over-limit cache denies the request (the
// local response is then sent), and callout when the rule needs the request's Redis call (not
// when this VM's lease admitted it).
//
//go:noinline
func (h *httpContext) prepareGlobal(a *applied, r *config.Rule, key []byte, now int64) (action types.Action, denied, callout bool) {
	rs := a.rs
	a.key = append(append(a.key[:0], rs.stateTag...), key...)
	if rs.overLimit != nil && !r.Shadow {
		if d, hit := rs.overLimit.hit(a.key, now, a.cost); hit {
			rs.lease.m.overLimitHit.Increment(1)
			return h.deny(rs, d), true, false
		}
	}
	if h.leaseGlobal(a, now) {
		return types.ActionContinue, false, false // admitted from this VM's lease: no callout for this rule
	}
	return types.ActionContinue, false, true
}

// decideGlobal is phase 1b: one callout decides every global rule, and Redis writes them only
// if none of the enforced ones denies; the request waits for the answer.
//
//go:noinline
func (h *httpContext) decideGlobal(now int64) types.Action {
	if deny, a := h.askRedis(now); deny {
		return h.deny(a.rs, a.decision)
	}
	if h.d.outstanding > 0 {
		return types.ActionPause
	}
	return h.finish()
}

// decideLocal decides a rule on this proxy's shared data, from a lease block if the rule has
// one (decideRequest calls decideShared directly for a rule without). It reports whether the
// request must be denied now (an enforced denial, contention, or a store failure under failure_mode
// "deny"). Every decision made in an overflow slot is counted here, allowed or denied.
func (h *httpContext) decideLocal(a *applied, key []byte, now, cost int64) (deny bool) {
	// A rule with a lease block spends this VM's reserved units first (see lease.go); a shadow
	// rule exists to observe exact decisions, so it takes no lease, as on the global path.
	if a.rs.lease != nil && a.rs.rule.Scope == config.ScopeLocal && !a.rs.rule.Shadow {
		return h.decideLeased(a, key, now, cost)
	}
	return h.decideShared(a, key, now, cost)
}

// decideLeased is decideLocal for a rule with a lease block: from this VM's lease when it has
// the units, else with a lease take. It is kept out of decideLocal's line (see doc.go): most
// rules have no lease.
//
//go:noinline
func (h *httpContext) decideLeased(a *applied, key []byte, now, cost int64) (deny bool) {
	if a.rs.lease.spend(a, key, now, cost) {
		return false
	}
	return h.decideLease(a, key, now, cost)
}

// decideShared decides a rule on the key's state in shared data, without a lease.
func (h *httpContext) decideShared(a *applied, key []byte, now, cost int64) (deny bool) {
	// The rule's state is read through one local: a.rs read again after the call would be a
	// load and a nil check of its own, in code a VM's first request compiles.
	rs := a.rs
	if err := rs.table.Decide(key, now, cost, &a.pending); err != nil {
		return h.undecided(a, err)
	}
	if a.pending.Overflow {
		rs.m.overflow.Increment(1)
	}
	a.decision, a.decided, a.local = a.pending.Decision, true, true
	return !a.decision.Allowed && !rs.rule.Shadow
}

// undecided handles a rule whose state Table.Decide could not read or decide on (err): lost
// races or a store failure. It reports whether the request must be denied. It is kept out of
// decideShared's line (see doc.go): a decision that succeeds (a VM's first request, nearly
// always) needs none of it.
//
//go:noinline
func (h *httpContext) undecided(a *applied, err error) (deny bool) {
	p := h.plugin
	if errors.Is(err, sharedstate.ErrAttemptsExhausted) {
		return h.contention(a)
	}
	p.storeFailure(a.rs, err)
	// A shadow rule never denies, not even under failure_mode "deny": it only counts the
	// failure (store_errors_total), like its other decisions.
	if p.cfg.FailureMode == config.FailDeny && !a.rs.rule.Shadow {
		a.decision = failureDecision(a.rs)
		return true
	}
	return false
}

// contention handles a rule whose compare-and-swap attempts all lost to other workers. That is
// not a store failure, and failure_mode does not apply: admitting the request would admit it
// uncounted, beyond the limit. An enforced rule denies it (counted in cas_exhausted, with a
// Retry-After of one second: the race is over by then); a shadow rule only counts it. It
// reports whether the request must be denied.
func (h *httpContext) contention(a *applied) (deny bool) {
	a.rs.m.casExhausted.Increment(1)
	a.decided = false
	if a.rs.rule.Shadow {
		return false
	}
	a.decision = contentionDecision(a.rs)
	return true
}

// finish writes the local decisions (phase 2) and lets the request through, or denies it if a
// write that lost a race turned into a denial. Global rules are all decided by now.
//
// A write that lost a race decides again on the fresh state; if that becomes a denial, the
// rules already written keep their charge. That only happens when another worker took the last
// allowance between this request's read and its write, and it errs on the side of the limit:
// it can over-count one request, never admit one too many. The same holds for global rules:
// local rules are decided before the callout (a local denial sends none), but Redis commits
// its rules before the local writes, so a local write that loses its race and turns into a
// denial leaves the global rules charged.
func (h *httpContext) finish() types.Action {
	// This loop writes the rules of the common case: local, decided, without a lease take,
	// neither adaptive nor shaping, written at the first attempt, allowed. At the first rule
	// that needs more it hands the rest of the request to finishFrom (after the rule's write,
	// if it made it), so that a VM's first request of a plain configuration compiles this loop
	// alone (see doc.go).
	for i := range h.d.applied {
		a := &h.d.applied[i]
		// The rule's state is read through one local: each a.rs would be a load of its own,
		// with a nil check of its own, in code a VM's first request compiles.
		rs := a.rs
		if !a.decided || !a.local || a.take > 0 || a.take > a.cost || rs.adaptive != nil || rs.shape != nil {
			return h.finishFrom(i, nil, false)
		}
		err := rs.table.Commit(&a.pending)
		if err != nil || a.pending.Retries > 0 || !a.pending.Decision.Allowed {
			return h.finishFrom(i, err, true)
		}
		if a.pending.Claimed || a.pending.Evicted {
			rs.placed(&a.pending)
		}
		// Written, without a lease take: the decision stands.
		a.decision = a.pending.Decision
		rs.m.allowed.Increment(1)
	}
	// The values are rendered into the context's own buffer, which a reused context keeps
	// (see recycleContext), so that a steady stream of requests allocates nothing for them.
	h.headers.render(h.d.applied)
	h.finished = true
	h.plugin.giveDecisions(h)
	return types.ActionContinue
}

// finishFrom is finish from its i-th rule on, for every kind of rule. When committed is set,
// rule i's state has been written already (Table.Commit returned err). It is kept out of
// line for the reason given in finish.
//
//go:noinline
func (h *httpContext) finishFrom(i int, err error, committed bool) types.Action {
	p := h.plugin
	shaping := false // an adaptive or shaping rule admitted the request
	for ; i < len(h.d.applied); i++ {
		a := &h.d.applied[i]
		if !a.decided {
			continue
		}
		rs := a.rs
		if a.local {
			if !committed {
				err = rs.table.Commit(&a.pending)
			}
			committed = false
			if a.pending.Retries > 0 {
				rs.m.casRetries.Increment(uint64(a.pending.Retries))
			}
			if a.pending.Claimed || a.pending.Evicted {
				rs.placed(&a.pending)
			}
			if err == nil && a.take <= 0 && a.take <= a.cost {
				a.decision = a.pending.Decision
			} else if action, denied, skip := h.settleCommit(a, rs.rule, err); denied {
				return action
			} else if skip {
				continue
			}
		}
		if !a.decision.Allowed {
			if action, denied := h.refused(a); denied {
				return action
			}
			continue
		}
		rs.m.allowed.Increment(1)
		shaping = shaping || rs.adaptive != nil || rs.shape != nil
	}
	h.headers.render(h.d.applied)
	h.finished = true
	if shaping {
		return h.finishShaped()
	}
	p.giveDecisions(h)
	return types.ActionContinue
}

// finishShaped is the end of finish for a request that an adaptive or shaping rule admitted
// (only they fill h.observed or hold a request). It is kept out of finish's line (see
// doc.go): most requests meet neither.
//
//go:noinline
func (h *httpContext) finishShaped() types.Action {
	p := h.plugin
	// A shaping rule that admitted the request with a delay holds it until the latest release
	// time among them; the tick resumes it.
	shaper, delay := h.admitted()
	p.giveDecisions(h)
	if shaper != nil {
		return h.hold(shaper, delay)
	}
	if len(h.observed) > 0 {
		// The request goes upstream now: the latency adaptive rules judge starts here, not at
		// its arrival, so that time spent waiting for Redis is not taken for a slow upstream.
		h.startedAt = p.now()
	}
	return types.ActionContinue
}

// The functions below are the parts of finish that a request needs only for some rules (leases,
// shaping, adaptive) or when a write fails. Each is kept out of line (see doc.go): inline,
// they would be compiled with finish on every VM's first request, whether its rules use them
// or not.

// settleCommit completes the write of the local rule r's decision a after Commit returned
// err, or after a write made with a lease take: a take that lost its race is retried as an
// exact decision, lost races and store failures are handled, and an admitted take is
// recorded in the VM's lease. It reports denied, with the action to return, when the request
// is denied, and skip when the rule ends up with no decision of its own to apply.
//
//go:noinline
func (h *httpContext) settleCommit(a *applied, r *config.Rule, err error) (action types.Action, denied, skip bool) {
	p := h.plugin
	if err == nil && a.take > a.cost && !a.pending.Decision.Allowed {
		err = h.retakeExact(a)
	}
	if errors.Is(err, sharedstate.ErrAttemptsExhausted) {
		if h.contention(a) {
			return h.deny(a.rs, a.decision), true, false
		}
		return types.ActionContinue, false, true
	}
	if err != nil {
		p.storeFailure(a.rs, err)
		a.decided = false
		if p.cfg.FailureMode == config.FailDeny && !r.Shadow {
			return h.deny(a.rs, failureDecision(a.rs)), true, false
		}
		return types.ActionContinue, false, true
	}
	a.decision = a.pending.Decision
	if a.take > 0 && a.decision.Allowed {
		a.decision, a.leased = a.rs.lease.taken(a.key, h.startedAt, a.take, a.cost, a.decision)
	}
	return types.ActionContinue, false, false
}

// admitted notes the admissions of the request's adaptive and shaping rules, once every rule
// has admitted it: an adaptive rule is to observe the request's outcome, and the request is
// held for the longest of the shaping rules' delays. It returns that delay and its rule (nil
// when no shaping rule delays the request).
//
//go:noinline
func (h *httpContext) admitted() (shaper *ruleState, delay int64) {
	for i := range h.d.applied {
		a := &h.d.applied[i]
		if !a.decided || !a.decision.Allowed {
			continue
		}
		if a.rs.adaptive != nil {
			h.observed = append(h.observed, a.rs)
		}
		if a.rs.shape != nil && int64(a.decision.Delay) > delay {
			shaper, delay = a.rs, int64(a.decision.Delay)
		}
	}
	return shaper, delay
}

// refused applies the decided rule a's refusal of the request: a shadow rule counts it and
// tells the upstream; an enforced rule denies the request, and refused returns the action,
// with denied set. It is kept out of finish's line (see doc.go): a request every rule admits
// needs none of it.
//
//go:noinline
func (h *httpContext) refused(a *applied) (action types.Action, denied bool) {
	r := a.rs.rule
	if r.Shadow {
		a.rs.m.shadowDenied.Increment(1)
		tellUpstream(r)
		return types.ActionContinue, false
	}
	return h.deny(a.rs, a.decision), true
}

// hold queues the admitted request until the shaping rule shaper releases it, delay from now;
// the tick resumes it.
//
//go:noinline
func (h *httpContext) hold(shaper *ruleState, delay int64) types.Action {
	now := h.plugin.now()
	h.plugin.enqueue(h, shaper, now, now+delay)
	return types.ActionPause
}

// showsHeaders reports whether the rule's decisions reach clients as rate-limit headers: an
// enforced rule's always, a shadow rule's only when it opts in (shadow_headers), since a
// client that honours them would slow down for a limit nobody enforces.
func (rs *ruleState) showsHeaders() bool { return !rs.rule.Shadow || rs.rule.ShadowHeaders }

// tellUpstream adds the shadow rule's request header, if it has one, to the request that goes
// upstream, so the upstream learns that the rule would have denied it (as Envoy's
// local_ratelimit request_headers_to_add_when_not_enforced does). The value is the rule's
// name; several shadow rules naming one header add one line each. It is kept out of finish's
// line, which calls it only for a shadow rule's denial (see settleCommit).
//
//go:noinline
func tellUpstream(r *config.Rule) {
	if r.ShadowRequestHeader == "" {
		return
	}
	if err := abi.AddHttpRequestHeader(r.ShadowRequestHeader, r.Name); err != nil {
		abi.LogDebug("ratelimit: rule " + strconv.Quote(r.Name) + ": adding request header " + r.ShadowRequestHeader + ": " + err.Error())
	}
}

// failureDecision is what a denial for failure_mode "deny" reports: nothing left, try again in
// a second (the store may have recovered by then).
func failureDecision(rs *ruleState) algorithms.Decision {
	return algorithms.Decision{Limit: limitInForce(rs), RetryAfter: 1e9, ResetAfter: 1e9}
}

// limitInForce is the limit a denial without a decision states: the configured limit, or for
// an adaptive rule the limit its controller holds now (what RateLimit-Policy and the
// ratelimit_adaptive_limit gauge state), not its max_limit.
func limitInForce(rs *ruleState) int64 {
	if rs.adaptive != nil {
		return rs.adaptive.lim.limit
	}
	return rs.rule.Algorithm.Limit
}

// contentionDecision is what a denial after lost compare-and-swap races reports: nothing left
// for now, try again in a second.
func contentionDecision(rs *ruleState) algorithms.Decision {
	return algorithms.Decision{Limit: limitInForce(rs), RetryAfter: 1e9, ResetAfter: 1e9}
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

// deny sends the rule's local response. The rule's denied counter is incremented here and only
// here, so every denial is counted exactly once.
func (h *httpContext) deny(rs *ruleState, d algorithms.Decision) types.Action {
	h.finished = true
	d = clampWaits(d, rs.maxWait)
	h.refundLeases()
	h.plugin.giveDecisions(h)
	rs.m.denied.Increment(1)
	r := rs.rule
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
		headers = appendRuleHeaders(headers, r.RateLimitHeaders, rs, d)
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

// isGrpcRequest reports whether the current request is gRPC: its content-type is exactly
// application/grpc, or that with a '+' suffix such as +proto (the gRPC over HTTP/2 spec),
// compared case-sensitively. That is the test Envoy's Grpc::Common::hasGrpcContentType
// makes, and it must be the same one: for a request Envoy does not take for gRPC, it ignores
// the grpc_status of the local reply and sends the HTTP response as given, so a request the
// filter took for gRPC alone (a ";charset=" parameter, say) would get a 429 without its
// content-type or body.
func isGrpcRequest() bool {
	ct, err := abi.GetHttpRequestHeader("content-type")
	if err != nil || !strings.HasPrefix(ct, "application/grpc") {
		return false
	}
	rest := ct[len("application/grpc"):]
	return rest == "" || rest[0] == '+'
}

// OnHttpResponseHeaders adds the rate-limit headers decided on the request (see
// rateLimitHeaders).
func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	defer recoverTo("OnHttpResponseHeaders", nil)
	if len(h.observed) > 0 {
		h.noteResponse()
	}
	// The headers are added here rather than by a function of their own: a VM's first
	// request compiles every function it calls (see doc.go), and each is code of its own.
	rh := &h.headers
	var start int32
	for i, name := range rateLimitHeaderNames {
		if rh.set&(1<<i) == 0 {
			continue
		}
		end := rh.ends[i]
		if err := abi.AddHttpResponseHeaderBytes(name, rh.values[start:end]); err != nil {
			logAddFailure(name, err)
		}
		start = end
	}
	return types.ActionContinue
}

// noteResponse records when the upstream answered and with what status, for the adaptive
// rules that observe the request. It is kept out of OnHttpResponseHeaders's line for the
// reason settleStream is.
//
//go:noinline
func (h *httpContext) noteResponse() {
	h.respondedAt = h.plugin.now()
	if s, err := abi.GetHttpResponseHeader(":status"); err == nil {
		h.status = atoi(s)
	}
}

// OnHttpStreamDone forgets the stream. A callout still in flight for it decides nothing for it
// when its answer arrives (see lateAnswer for what the answer still does).
func (h *httpContext) OnHttpStreamDone() {
	defer recoverTo("OnHttpStreamDone", nil)
	// Envoy logs a stream once; a second call must not offer the context for reuse twice.
	// One return, not an early one for that case: the compiler writes the deferred call out
	// at each return, and a VM's first request compiles this function.
	if !h.done {
		h.done = true
		if (!h.finished && h.d != nil) || h.queued || len(h.observed) > 0 {
			h.settleStream()
		}
		// Envoy calls nothing of a stream's after proxy_on_log but proxy_on_done and
		// proxy_on_delete, which reach no filter code. What can still refer to the context is
		// a callout's callback, which may answer after the stream ended, and the shaping
		// queue, which dequeue has just emptied of it: a context without either is the
		// plugin's again.
		if !h.calledOut && !h.queued {
			h.plugin.recycleContext(h)
		}
	}
}

// settleStream does the part of OnHttpStreamDone that only some streams need: one that ended
// undecided, one that waits in a shaping queue, one an adaptive rule observes. It is kept out
// of line (see doc.go): inline, it would be compiled with OnHttpStreamDone on every VM's
// first request, which needs none of it.
//
//go:noinline
func (h *httpContext) settleStream() {
	if !h.finished && h.d != nil {
		// The client went away before the request was decided (it never reached the
		// upstream): the units leases gave it go back, as for a denied request.
		h.refundLeases()
		h.plugin.giveDecisions(h)
	}
	if h.queued && h.plugin.dequeue(h.id) {
		// The client gave up while the request waited in a shaping queue: it never reached
		// the upstream, so it says nothing about the upstream's health.
		h.observed = h.observed[:0]
	}
	if len(h.observed) > 0 {
		h.observe(h.plugin.now())
	}
}

// atoi parses a status code; anything else is 0.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// takeDecisions returns an empty working set for one request.
func (p *plugin) takeDecisions() *decisions {
	if n := len(p.free); n > 0 {
		d := p.free[n-1]
		p.free = p.free[:n-1]
		return d
	}
	return &decisions{}
}

// giveDecisions returns a request's working set once nothing refers to it any more: a set
// with callouts still in flight is left to the garbage collector instead.
func (p *plugin) giveDecisions(h *httpContext) {
	d := h.d
	if d == nil {
		return
	}
	h.d = nil
	if d.outstanding > 0 || len(p.free) >= 64 {
		return
	}
	d.applied = d.applied[:0]
	d.sentAt, d.retried = 0, false
	p.free = append(p.free, d)
}

// add appends a rule to the set, reusing the buffers of an earlier request.
func (d *decisions) add(rs *ruleState) *applied {
	if len(d.applied) < cap(d.applied) {
		d.applied = d.applied[:len(d.applied)+1]
	} else {
		d.grow()
	}
	a := &d.applied[len(d.applied)-1]
	// Field by field, not *a = applied{rs: rs, pending: a.pending, key: a.key[:0]}: that
	// builds the whole struct (Pending included) aside and copies it back with a typed
	// memmove, about half a microsecond per rule in a Wasm VM. Pending is reset by
	// Table.Decide; every other field starts as in a new applied
	// (TestDecisionsAddResetsEveryField).
	a.rs, a.decision, a.decided, a.local = rs, algorithms.Decision{}, false, false
	a.key, a.cost = a.key[:0], 0
	a.leased, a.take, a.spent, a.sentAt = nil, 0, false, 0
	return a
}

// grow appends an empty applied to the set. A set the plugin made has room for every rule (see
// configure), so this runs only for one the garbage collector's side made (takeDecisions on an
// empty free list); it is kept out of add's line, which OnHttpRequestHeaders inlines (see
// doc.go).
//
//go:noinline
func (d *decisions) grow() {
	d.applied = append(d.applied, applied{})
}

// rateLimitHeaderNames are the names of the rate-limit response headers, in the order they
// are added: the IETF draft fields, then the legacy ones.
var rateLimitHeaderNames = [...]string{"ratelimit-policy", "ratelimit",
	"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}

// Bits of rateLimitHeaders.set: which of rateLimitHeaderNames are present.
const (
	draftHeaders  = 0b00011
	legacyHeaders = 0b11100
)

// rateLimitHeaders are the rate-limit headers of an allowed request, rendered when the request
// is decided and added to its response. The names are constants and the values share one
// buffer, cut at ends, where a list of name and value pairs would cost an allocation for the
// list and one per value; the buffer belongs to the stream's context and is reused with it
// (see recycleContext), so a steady stream of requests allocates nothing for its headers.
type rateLimitHeaders struct {
	values []byte
	ends   [len(rateLimitHeaderNames)]int32 // where each present header's value ends in values
	set    uint8                            // bit i: rateLimitHeaderNames[i] is present
}

// render renders the response headers of an allowed request into rh, whose value buffer it
// reuses. The IETF draft fields list every rule that applied, as the draft allows several
// policies; the legacy X-RateLimit-* fields can hold one, so they describe the most
// restrictive rule (the one with the least remaining). It renders in place, not into a new
// rateLimitHeaders copied to the context: that copy moves a slice under the garbage
// collector's write barrier, in code a VM's first request compiles.
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
		// The RateLimit items follow the policies. The one rule's item is rendered here;
		// several rules' items by a loop of their own, which a request with one draft rule
		// (the usual case) neither runs nor compiles.
		rh.ends[0] = int32(len(buf))
		if drafts == 1 {
			// appendRateLimitItemAfter, written out: one function fewer for a VM's first
			// request to compile.
			d := &draft.decision
			buf = appendInt(appendInt(buf, draft.rs.item, d.Remaining), ";t=", ceilSeconds(int64(d.ResetAfter)))
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

// tighter reports whether the decision d is more restrictive than e, for the legacy fields,
// which hold one rule: less remaining, or as much remaining for longer. Without the second
// half a tie would go to the first rule, and a client with nothing left under a 1 s rule and
// a 1 min rule would be told to come back after a second, to be denied for 59 more.
func tighter(d, e *algorithms.Decision) bool {
	return d.Remaining < e.Remaining || d.Remaining == e.Remaining && d.ResetAfter > e.ResetAfter
}

// appendLegacy appends the values of the legacy X-RateLimit-* fields for the decision d to
// buf and marks them present. It is kept out of render's line (see doc.go): the default
// rate_limit_headers ("draft") has none of them.
//
//go:noinline
func (rh *rateLimitHeaders) appendLegacy(buf []byte, d *algorithms.Decision) []byte {
	// One call site for the three values, not three.
	legacy := [3]int64{d.Limit, d.Remaining, ceilSeconds(int64(d.ResetAfter))}
	for j, v := range legacy {
		buf = appendInt(buf, "", v)
		rh.ends[2+j] = int32(len(buf))
	}
	rh.set |= legacyHeaders
	return buf
}

// appendNextPolicy appends the rule's RateLimit-Policy item after another's. It is kept out of
// render's line (see doc.go): most requests show one rule's headers.
//
//go:noinline
func (rs *ruleState) appendNextPolicy(buf []byte) []byte {
	return rs.appendPolicy(append(buf, ", "...))
}

// appendRateLimitItems appends the RateLimit items of every decided draft rule of rules that
// shows its headers, in order, joined by ", " (render, for more than one such rule).
//
//go:noinline
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

// logAddFailure logs a response header the host would not add. It is kept out of line (a
// formatted log builds its arguments inline, a good part of the loop in OnHttpResponseHeaders
// that adds the headers; see doc.go): a header that is added needs none of it.
//
//go:noinline
func logAddFailure(name string, err error) {
	abi.LogDebug("ratelimit: adding response header " + name + ": " + err.Error())
}

// appendRuleHeaders renders the rate-limit headers of one rule's decision (a denial).
func appendRuleHeaders(dst [][2]string, mode config.HeadersMode, rs *ruleState, d algorithms.Decision) [][2]string {
	if mode == config.HeadersDraft || mode == config.HeadersBoth {
		dst = append(dst,
			[2]string{"ratelimit-policy", rs.policyString()},
			[2]string{"ratelimit", string(appendRateLimitItem(nil, rs.rule.Name, d))})
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

// appendRateLimitItem renders one item of the IETF draft RateLimit field: remaining quota r
// and seconds t until the quota is fully available again.
func appendRateLimitItem(dst []byte, name string, d algorithms.Decision) []byte {
	dst = append(dst, '"')
	dst = append(dst, name...)
	dst = append(dst, `";r=`...)
	return appendRateLimitItemAfter(dst, d)
}

// appendRateLimitItemAfter renders the part of a RateLimit item after its name's `";r=`: the
// remaining quota and the seconds until it is fully available again.
func appendRateLimitItemAfter(dst []byte, d algorithms.Decision) []byte {
	return appendInt(appendInt(dst, "", d.Remaining), ";t=", ceilSeconds(int64(d.ResetAfter)))
}

// appendInt appends prefix and then the decimal form of v, as
// strconv.AppendInt(append(dst, prefix...), v, 10) does. It is one function for every number
// of the rate-limit headers rather than strconv.AppendInt inlined at each, and it writes the
// text before the number too: every inlined copy, like every append of its own, would be
// compiled again in each function of a VM's first request that renders a number (see
// doc.go).
//
//go:noinline
func appendInt(dst []byte, prefix string, v int64) []byte {
	return strconv.AppendInt(append(dst, prefix...), v, 10)
}

// ceilSeconds rounds nanoseconds up to whole seconds: a client told to wait 0 seconds while
// 300 ms remain would retry too early and be denied again. The callers clamp to the rule's
// longest wait first (see maxWait); the bound here only keeps the rounding from overflowing
// whatever it is given.
func ceilSeconds(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return (min(ns, algorithms.MaxExact) + 1e9 - 1) / 1e9
}
