package filter

import (
	"errors"
	"strconv"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// decideLocal decides a rule on this proxy's shared data, from a lease block if the rule has
// one, and reports whether the request must be denied now (an enforced denial, contention, or
// a store failure under failure_mode "deny").
func (h *httpContext) decideLocal(a *applied, key []byte, now, cost int64) (deny bool) {
	// A shadow rule observes exact decisions, so it takes no lease, as on the global path.
	if a.rs.lease != nil && a.rs.rule.Scope == config.ScopeLocal && !a.rs.rule.Shadow {
		return h.decideLeased(a, key, now, cost)
	}
	return h.decideShared(a, key, now, cost)
}

// decideLeased is decideLocal for a rule with a lease block (out of line, see doc.go): from
// this VM's lease when it has the units, else with a take (Table.Take, see lease.go), written
// by finish like any local decision and recorded in the lease there (leaseState.taken).
func (h *httpContext) decideLeased(a *applied, key []byte, now, cost int64) (deny bool) {
	if a.rs.lease.spend(a, key, now, cost) {
		return false
	}
	reserve := a.rs.lease.reserve(key, now, cost)
	a.key = append(a.key[:0], key...)
	if err := a.rs.table.Take(key, now, cost, reserve, &a.pending); err != nil {
		a.take = 0
		return h.undecided(a, err)
	}
	if a.pending.Overflow {
		// In an overflow slot Take reserves nothing: the decision is an exact one.
		a.take = 0
		a.decision, a.decided, a.local = a.pending.Decision, true, true
		a.rs.m.overflow.Increment(1)
		return !a.decision.Allowed && !a.rs.rule.Shadow
	}
	// take > 0 marks a take, to be recorded in the lease when written (settleCommit).
	a.decision, a.decided, a.local, a.take = a.pending.Decision, true, true, cost
	return !a.decision.Allowed && !a.rs.rule.Shadow
}

// decideShared decides a rule on the key's state in shared data, without a lease.
func (h *httpContext) decideShared(a *applied, key []byte, now, cost int64) (deny bool) {
	// a.rs read once: read again after the call it would be a load and a nil check of its own,
	// in code a VM's first request compiles.
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

// undecided handles a rule whose state could not be read or written (err): lost races or a
// store failure. It reports whether the request must be denied (out of line, see doc.go).
func (h *httpContext) undecided(a *applied, err error) (deny bool) {
	p := h.plugin
	if errors.Is(err, sharedstate.ErrAttemptsExhausted) {
		return h.contention(a)
	}
	p.storeFailure(a.rs, err)
	// A shadow rule never denies, not even under failure_mode "deny".
	if p.cfg.FailureMode == config.FailDeny && !a.rs.rule.Shadow {
		a.decision = failureDecision(a.rs)
		return true
	}
	return false
}

// contention handles a rule whose compare-and-swap attempts all lost to other workers: not a
// store failure, so failure_mode does not apply (admitting would admit uncounted). An enforced
// rule denies the request, and reports so; a shadow rule only counts it (cas_exhausted).
func (h *httpContext) contention(a *applied) (deny bool) {
	a.rs.m.casExhausted.Increment(1)
	a.decided = false
	if a.rs.rule.Shadow {
		return false
	}
	a.decision = failureDecision(a.rs)
	return true
}

// finish writes the local decisions (phase 2) and lets the request through, or denies it if a
// write that lost a race turned into a denial. Global rules are all decided by now.
//
// A write that lost a race decides again on the fresh state; if that becomes a denial, the
// rules already written (Redis' included: it commits before the local writes) keep their
// charge. That only happens when another worker took the last allowance between this
// request's read and its write, and errs on the side of the limit: it can over-count one
// request, never admit one too many.
func (h *httpContext) finish() types.Action {
	// This loop writes the rules of the common case: decided, without a lease take, neither
	// adaptive nor shaping, allowed (by Redis, or written locally at the first attempt). At the
	// first rule that needs more it hands the rest to finishFrom, so that a VM's first request
	// of a plain configuration compiles this loop alone (see doc.go).
	for i := range h.d.applied {
		a := &h.d.applied[i]
		// Read once: each a.rs would be a load and a nil check of its own (see decideShared).
		rs := a.rs
		if !a.decided || a.take > 0 || a.take > a.cost || rs.adaptive != nil || rs.shape != nil || !a.local && !a.decision.Allowed {
			return h.finishFrom(i, nil, false)
		}
		if a.local {
			err := rs.table.Commit(&a.pending)
			if err != nil || a.pending.Retries > 0 || !a.pending.Decision.Allowed {
				return h.finishFrom(i, err, true)
			}
			if a.pending.Claimed || a.pending.Evicted {
				rs.placed(&a.pending)
			}
			// Written, without a lease take: the decision stands.
			a.decision = a.pending.Decision
		}
		rs.m.allowed.Increment(1)
		rs.countNearLimit(&a.decision)
	}
	h.headers.render(h.d.applied)
	h.finished = true
	if h.plugin.cfg.FilterState {
		h.setContinuedState()
	}
	if h.plugin.usage {
		h.openReservations()
	}
	h.plugin.giveDecisions(h)
	return types.ActionContinue
}

// finishFrom is finish from its i-th rule on, for every kind of rule; with committed, rule i's
// Table.Commit has run already and returned err. Out of line (see finish).
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
			} else if action, denied, skip := h.settleCommit(a, err); denied {
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
		rs.countNearLimit(&a.decision)
		shaping = shaping || rs.adaptive != nil || rs.shape != nil
	}
	h.headers.render(h.d.applied)
	h.finished = true
	if p.cfg.FilterState {
		h.setContinuedState()
	}
	if p.usage {
		h.openReservations()
	}
	if shaping {
		return h.finishShaped()
	}
	p.giveDecisions(h)
	return types.ActionContinue
}

// finishShaped ends finish for a request adaptive or shaping rules admitted: the adaptive ones
// observe its outcome, and it is held for the longest shaping delay (out of line, see doc.go).
func (h *httpContext) finishShaped() types.Action {
	p := h.plugin
	var shaper *ruleState
	var delay int64
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
	p.giveDecisions(h)
	if shaper != nil {
		now := p.now()
		p.enqueue(h, shaper, now, now+delay)
		return types.ActionPause
	}
	if len(h.observed) > 0 {
		// The request goes upstream now: the latency adaptive rules judge starts here, not at
		// its arrival, so that time spent waiting for Redis is not taken for a slow upstream.
		h.startedAt = p.now()
	}
	return types.ActionContinue
}

// The functions below are the parts of finish that only some rules (leases, shaping, adaptive)
// or a failed write need, each out of line (see doc.go).

// settleCommit completes the write of a local rule's decision a after Commit returned err, or
// after a lease take: a failure is handled (undecided), an admitted take recorded in the lease.
// It reports denied, with the action to return, or skip when the rule has no decision to apply.
func (h *httpContext) settleCommit(a *applied, err error) (action types.Action, denied, skip bool) {
	if err != nil {
		a.decided = false
		if h.undecided(a, err) {
			return h.deny(a.rs, a.decision), true, false
		}
		return types.ActionContinue, false, true
	}
	a.decision = a.pending.Decision
	if a.take > 0 && a.decision.Allowed {
		a.decision, a.leased = a.rs.lease.taken(a.key, h.startedAt, a.cost+a.pending.Reserved, a.cost, a.decision)
	}
	return types.ActionContinue, false, false
}

// refused applies the decided rule a's refusal: a shadow rule counts it and tells the
// upstream; an enforced rule denies the request, returning the action with denied set.
func (h *httpContext) refused(a *applied) (action types.Action, denied bool) {
	r := a.rs.rule
	if r.Shadow {
		a.rs.m.shadowDenied.Increment(1)
		tellUpstream(r)
		return types.ActionContinue, false
	}
	return h.deny(a.rs, a.decision), true
}

// tellUpstream adds the shadow rule's request header, if it has one, with the rule's name, as
// Envoy's local_ratelimit request_headers_to_add_when_not_enforced does.
func tellUpstream(r *config.Rule) {
	if r.ShadowRequestHeader == "" {
		return
	}
	if err := abi.AddHttpRequestHeader(r.ShadowRequestHeader, r.Name); err != nil {
		abi.LogDebug("ratelimit: rule " + strconv.Quote(r.Name) + ": adding request header " + r.ShadowRequestHeader + ": " + err.Error())
	}
}
