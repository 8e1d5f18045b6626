package filter

import (
	"time"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// Leases (a rule's lease block, see config.Lease and the README's lease section).
//
// A local rule with a lease block debits a batch of units for a key from shared data with one
// compare-and-swap, through the same Table.Decide and Table.Commit as an exact decision, and
// keeps the units it did not spend on the request in this VM's memory (heldLease). Later
// requests for the key on this VM spend them with no shared-data read or write, until they
// run out or the lease's ttl passes; what is left then is dropped. Units are always debited
// before they are spent, so over the long run nothing is admitted that the algorithm did not
// admit; within an interval the excess over the algorithm's contract is at most what the
// holders had reserved before it began, at most (lease holders x batch).
//
// The batch adapts: a take asks for at most 1/leaseShare of the key's remaining allowance as
// the previous take on this VM saw it, so that eight workers taking at once reserve at most
// what remains; as the remaining allowance falls the batch falls to the request's own cost,
// and decisions are exact again. A take whose batch is denied is decided again for the
// request's cost alone, so a lease never denies a request an exact decision would admit.
//
// A global rule with a lease block does the same with Redis (leaseGlobal): a worker VM that
// holds no units for the key asks Redis for a batch in the request's one script call, as the
// rule's item (its cost is the batch), and spends the rest from VM memory; a request that
// finds units sends no callout for the rule. The lease is per VM rather than per proxy in
// shared data: a spend then costs no shared-data read or write either, and the holders of
// the bound are proxies x worker VMs. A batch Redis denies is decided again for the request's
// cost alone, in a second call (retakeGlobal), so again no exact admission is denied. The
// rule also keeps an over-limit cache (overLimitCache).

// leaseShare is the share of a key's remaining allowance one take may reserve: 1/8, so that
// eight worker VMs (a typical Envoy --concurrency) taking at once reserve at most all of it.
const leaseShare = 8

// maxHeld bounds the keys one VM remembers per leased rule (and per over-limit cache), so a
// flood of distinct keys cannot grow a VM's memory: a key that finds the map full after a
// sweep of the expired ones is decided exactly.
const maxHeld = 4096

// leaseState is a leased rule's VM-local part.
type leaseState struct {
	batch int64
	ttl   int64
	held  map[string]*heldLease
	m     leaseMetrics
}

// leaseMetrics count what leases do; their names follow the rule metrics'
// (ratelimit_<rule>_<event>_total, see ruleState.defineMetrics).
type leaseMetrics struct {
	taken        abi.MetricCounter // takes that reserved units beyond the request's cost
	dropped      abi.MetricCounter // reserved units dropped unspent (ttl passed, or too few for a request)
	overLimitHit abi.MetricCounter // requests a global rule denied from its over-limit cache
}

// heldLease is what this VM knows of one key: the units it may still spend, until when, and
// the key's allowance as the last take saw it (for the next batch size and the headers).
type heldLease struct {
	units   int64 // reserved, unspent units
	expires int64 // when units are dropped
	// remaining is the key's remaining allowance after the last take (the shared state's
	// Decision.Remaining, not counting units); limit and resetAt are that decision's Limit
	// and now + ResetAfter.
	remaining, limit, resetAt int64
}

func newLeaseState(l *config.Lease) *leaseState {
	return &leaseState{batch: l.Batch, ttl: int64(l.TTL), held: map[string]*heldLease{}}
}

// defineLeaseMetrics defines a leased rule's counters with the rule metrics' helper def.
func (rs *ruleState) defineLeaseMetrics(def func(event string) abi.MetricCounter) {
	if rs.lease == nil {
		return
	}
	rs.lease.m = leaseMetrics{
		taken:        def("lease_taken"),
		dropped:      def("lease_units_dropped"),
		overLimitHit: def("over_limit_cache_hits"),
	}
}

// spend decides the request from the VM's lease on key, if it holds enough unexpired units,
// and reports whether it did. Expired units, and units too few for the request, are dropped
// here: they were debited, so dropping them only under-admits.
func (l *leaseState) spend(a *applied, key []byte, now, cost int64) bool {
	h := l.held[string(key)] // no allocation: the compiler converts for the lookup only
	if h == nil {
		return false
	}
	if h.units > 0 && (now >= h.expires || h.units < cost) {
		l.m.dropped.Increment(uint64(h.units))
		h.units = 0
	}
	if h.units == 0 || cost <= 0 {
		return false
	}
	h.units -= cost
	a.decision = algorithms.Decision{Allowed: true, Limit: h.limit,
		Remaining: h.remaining + h.units, ResetAfter: time.Duration(max(0, h.resetAt-now))}
	a.decided, a.leased = true, h
	return true
}

// size returns how many units a take for key should ask for: the request's cost plus a
// reserve of at most batch-cost, and at most 1/leaseShare of the key's remaining allowance
// as the last take saw it (a first take asks for the whole batch, and falls back to the
// cost if that is denied). A key the VM does not hold while its map is full (maxHeld) asks
// for the cost alone: the reserve could not be held (taken would find no room unless expired
// leases can be swept, and the exact take's taken sweeps them for the key's next request), and
// a flood of distinct keys must not make every other key debit a whole batch per request.
func (l *leaseState) size(key []byte, cost int64) int64 {
	want := l.batch
	if h := l.held[string(key)]; h != nil {
		want = min(want, h.remaining/leaseShare)
	} else if len(l.held) >= maxHeld {
		return cost
	}
	return max(want, cost)
}

// taken records a committed take of n units of which the request spent cost, with d the
// decision the shared state made for all n (its Remaining counts them all). It returns the
// request's decision: the key's remaining allowance as if the reserved units were not yet
// spent, which is what an exact decision would have reported; and the lease, so that the
// request's cost can be given back to it if a later rule denies the request.
func (l *leaseState) taken(key []byte, now, n, cost int64, d algorithms.Decision) (algorithms.Decision, *heldLease) {
	old := l.held[string(key)]
	if old == nil && len(l.held) >= maxHeld {
		l.sweep(now)
		if len(l.held) >= maxHeld {
			// No room (the map filled while the take was out): the reserve was debited and
			// cannot be held, so it is dropped.
			if n > cost {
				l.m.dropped.Increment(uint64(n - cost))
			}
			return d, nil
		}
	}
	if old != nil && old.units > 0 {
		// Units left from an earlier take (raced by a request paused on Redis): dropped.
		l.m.dropped.Increment(uint64(old.units))
		old.units = 0
	}
	// A fresh lease, never the old one reused: a request paused on Redis may still hold the
	// old one and refund its units there when another rule denies it; refunded into a lease
	// taken since, they would add to the new batch and its ttl, beyond the stated bound. A
	// refund into a replaced lease is lost instead (under-admission). Takes are rare (about
	// one per batch), so the allocation stays off the spend path.
	h := &heldLease{units: n - cost, expires: now + l.ttl, remaining: d.Remaining,
		limit: d.Limit, resetAt: now + int64(d.ResetAfter)}
	l.held[string(key)] = h
	if n > cost {
		l.m.taken.Increment(1)
	}
	d.Remaining += h.units
	return d, h
}

// refund gives a request's units back to the lease they came from, when another rule denied
// the request after the lease admitted it. They are still debited in shared data and still
// within the ttl they were taken for (refund keeps expires), so spending them later is sound;
// a lease replaced meanwhile simply loses them (under-admission).
func (l *leaseState) refund(h *heldLease, cost int64) {
	if h != nil && l.held != nil {
		h.units += cost
	}
}

// sweep forgets every key whose lease has expired, counting its units as dropped.
func (l *leaseState) sweep(now int64) {
	for k, h := range l.held {
		if now >= h.expires {
			if h.units > 0 {
				l.m.dropped.Increment(uint64(h.units))
			}
			delete(l.held, k)
		}
	}
}

// overLimitCache remembers, for a global rule with a lease block, the keys Redis denied and
// until when: a request for such a key that costs at least as much as the denied one is denied
// on the proxy with no callout until then. That is exact, not an approximation: Redis's
// RetryAfter is the earliest instant the same request could pass if nothing else arrives,
// other traffic can only push it later, and every algorithm with a global mode needs at
// least as long for a larger cost. The instant is counted from when the callout was sent,
// before Redis decided, so the cache never outlasts Redis's own answer (on clocks that agree).
// A denial decided on the rule's overflow key (the key had no key of its own in Redis) is not
// the key's and is not kept: the key may get a key of its own as soon as one expires, and is
// then decided on that.
type overLimitCache struct {
	denied map[string]overLimit
}

// overLimit is one cached denial: until when, for requests costing at least cost.
type overLimit struct {
	until, resetAt, limit, cost int64
}

// hit reports whether the cache denies the request, and the denial to send.
func (c *overLimitCache) hit(key []byte, now, cost int64) (algorithms.Decision, bool) {
	e, ok := c.denied[string(key)]
	if !ok || now >= e.until || cost < e.cost {
		return algorithms.Decision{}, false
	}
	return algorithms.Decision{Limit: e.limit, RetryAfter: time.Duration(e.until - now),
		ResetAfter: time.Duration(max(e.resetAt, e.until) - now)}, true
}

// record remembers Redis's denial of key for cost, decided on a callout sent at sentAt.
// Unsatisfiable denials (RetryAfter 0) are not cached: they never pass, and the rule's own
// check refuses them without Redis's help next time too.
func (c *overLimitCache) record(key []byte, sentAt, cost int64, d algorithms.Decision) {
	if d.Allowed || d.RetryAfter <= 0 {
		return
	}
	if _, ok := c.denied[string(key)]; !ok && len(c.denied) >= maxHeld {
		for k, e := range c.denied {
			if sentAt >= e.until {
				delete(c.denied, k)
			}
		}
		if len(c.denied) >= maxHeld {
			return
		}
	}
	c.denied[string(key)] = overLimit{until: sentAt + int64(d.RetryAfter),
		resetAt: sentAt + int64(d.ResetAfter), limit: d.Limit, cost: cost}
}

// refundLeases gives back to their leases the units of a request that a rule denied after a
// lease had admitted it for another rule, or whose client reset it before it was decided.
func (h *httpContext) refundLeases() {
	if h.d == nil {
		return
	}
	for i := range h.d.applied {
		a := &h.d.applied[i]
		if a.leased != nil {
			a.rs.lease.refund(a.leased, a.cost)
			a.leased = nil
		}
	}
}

// retakeExact decides a request whose lease take lost its compare-and-swap race and does not
// fit the fresh state: the request's cost alone is decided and written, so that a lease never
// denies what an exact decision admits.
func (h *httpContext) retakeExact(a *applied) error {
	a.take = a.cost
	return a.rs.table.AllowN(a.key, h.startedAt, a.cost, &a.pending)
}

// inCall reports whether the rule has a part in the request's Redis call: a global rule that
// no lease of this VM admitted.
func (a *applied) inCall() bool { return a.rs.rule.Scope == config.ScopeGlobal && !a.spent }

// callN is what the rule's item in the Redis call debits: a lease's batch, or the request's
// cost.
func (a *applied) callN() int64 { return max(a.take, a.cost) }

// batchDenied reports whether Redis denied a lease's batch (more than the request's cost) for
// an enforced rule: the request's own cost must then be decided again, since an exact
// decision could admit it.
func (a *applied) batchDenied() bool {
	return a.take > a.cost && !a.decision.Allowed && !a.rs.rule.Shadow
}

// leaseGlobal admits the request for a global rule from this VM's lease on the key when it
// holds enough unexpired units (no callout for the rule), and reports whether it did.
// Otherwise it sets the batch the rule's item asks Redis for (leaseState.size). Shadow rules
// take no lease: their denials block nothing, so a batch Redis denies would not be decided
// again in the same all-or-nothing call, and the rule is there to observe exact decisions.
func (h *httpContext) leaseGlobal(a *applied, now int64) bool {
	l := a.rs.lease
	if l == nil || a.rs.rule.Shadow {
		return false
	}
	if l.spend(a, a.key, now, a.cost) {
		a.spent = true
		return true
	}
	a.take = l.size(a.key, a.cost)
	return false
}

// saw records a key's remaining allowance as Redis reported it on a denied batch, so that the
// next take on this VM asks for a batch that fits (leaseState.size); it holds no units.
func (l *leaseState) saw(key []byte, at int64, d algorithms.Decision) {
	l.taken(key, at, 0, 0, d)
}

// takenGlobal records a global rule's take that Redis committed at sentAt (units expire ttl
// after the callout was sent, so never later than they would have from Redis's instant) and
// returns the request's decision and lease, as taken does. A take decided on the rule's
// overflow key (its key bound reached in Redis) keeps no units for the key: they are dropped.
// So are the units of a take whose answer arrives (at now) when its ttl has already passed:
// they could not be spent, and held they would replace the key's live lease, whose units a
// later take has debited, with an expired one.
func (l *leaseState) takenGlobal(a *applied, sentAt, now int64, overflow bool) (algorithms.Decision, *heldLease) {
	if overflow || now >= sentAt+l.ttl {
		if a.take > a.cost {
			l.m.dropped.Increment(uint64(a.take - a.cost))
		}
		return a.decision, nil
	}
	return l.taken(a.key, sentAt, a.take, a.cost, a.decision)
}

// recordTakes records, once the request's one Redis call has committed (answered at now), the
// take of every leased global rule in it (c.answers holds the call's answers in rule order).
func (h *httpContext) recordTakes(d *decisions, now int64) {
	answers := h.plugin.redis.answers
	j := 0
	for i := range d.applied {
		a := &d.applied[i]
		if !a.inCall() {
			continue
		}
		overflow := j < len(answers) && answers[j].Overflow
		j++
		if a.take > 0 && a.decided && a.decision.Allowed {
			a.decision, a.leased = a.rs.lease.takenGlobal(a, d.sentAt, now, overflow)
		}
	}
}
