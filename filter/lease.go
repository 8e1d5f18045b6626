package filter

import (
	"time"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// Leases (a rule's lease block, see config.Lease and the README's lease section).
//
// A local rule with a lease block debits a batch of units for a key from shared data with one
// compare-and-swap (Table.Take, written like an exact decision), and keeps the units the
// request did not spend in this VM's memory (heldLease). Later requests for the key on this VM
// spend them with no shared-data access until they run out or the ttl passes; what is left
// then goes back to the key's state (Table.GiveBack). Units are debited before they are spent,
// so over the long run nothing is admitted that the algorithm did not admit; within an
// interval the excess is at most what the holders had reserved before it, at most (lease
// holders x batch).
//
// A take is the request's cost plus a reserve of at most batch-cost units, no more than this
// VM is expected to spend within ttl (leaseState.reserve) and 1/LeaseShare of the key's
// remaining allowance (Table.Take), so that sharedstate.LeaseShare holders taking at once
// reserve at most what remains. As the allowance falls the reserve falls to 0; a take whose reserve does not
// fit is the exact decision for the cost, so a lease never denies what an exact decision admits.
//
// A global rule with a lease block does the same with Redis (leaseGlobal): a VM without units
// for the key asks for a batch as the rule's item in the request's script call, and a request
// that finds units sends no callout for the rule; the holders are proxies x worker VMs. Its
// reserve is bounded by the remaining allowance the VM's previous take saw (the capacity for a
// new key). A denied batch is decided again for the cost alone (retakeGlobal), and one on the
// overflow key is decided for the cost alone by the script. Unspent units go back in the key's
// next take on this VM (redis.Item.GiveBack, named by their take's instant); those of a key
// the VM forgets first are dropped and counted, since giving them back alone would cost a
// callout. The rule also keeps an over-limit cache (overLimitCache).

// maxHeld bounds the keys one VM remembers per leased rule (and per over-limit cache): a key
// that finds the map full of unexpired leases is decided exactly.
const maxHeld = 4096

// leaseState is a leased rule's VM-local part.
type leaseState struct {
	batch, ttl int64
	capacity   int64 // burst, or limit: a global rule's first take reserves 1/LeaseShare of it
	held       map[string]*heldLease
	// order holds the leases in the order they were taken, from order[head] on: expiry times
	// are in the same order, so the expired ones are found at the front (expire).
	order []*heldLease
	head  int
	table *sharedstate.Table  // a local rule's, where unspent units go back (nil for a global rule)
	give  sharedstate.Pending // the write that does it
	m     leaseMetrics
}

// leaseMetrics count what leases do (see defineLeaseMetrics for their names).
type leaseMetrics struct {
	taken        abi.MetricCounter // takes that reserved units beyond the request's cost
	returned     abi.MetricCounter // reserved units given back to the key's state unspent
	dropped      abi.MetricCounter // reserved units lost unspent (global rules; or the state took none back)
	overLimitHit abi.MetricCounter // requests a global rule denied from its over-limit cache
}

// heldLease is what this VM knows of one key's lease.
type heldLease struct {
	key     string
	units   int64 // reserved, unspent units
	expires int64 // when units are given back
	// takenAt is the take's instant and used the units spent since (its own cost included):
	// the key's demand on this VM. at is the take's instant on the shared state's clock (Redis'
	// for a global rule), which a give-back names.
	takenAt, used, at int64
	// give holds a global lease's unspent units until the key's next take gives them back.
	give int64
	// remaining, limit and resetAt are the last take's decision (Remaining not counting units,
	// Limit, now + ResetAfter), for the next batch size and the headers.
	remaining, limit, resetAt int64
}

func newLeaseState(r *config.Rule, table *sharedstate.Table) *leaseState {
	return &leaseState{batch: r.Lease.Batch, ttl: int64(r.Lease.TTL), capacity: r.Algorithm.Capacity(),
		held: map[string]*heldLease{}, table: table}
}

// defineLeaseMetrics defines a leased rule's counters, appending each error to errs.
func (rs *ruleState) defineLeaseMetrics(errs []error) []error {
	def := func(event string) abi.MetricCounter {
		return defineCounter(statName("ratelimit_"+event+"_total", rs.rule.Name), &errs)
	}
	rs.lease.m = leaseMetrics{taken: def("lease_taken"), returned: def("lease_units_returned"),
		dropped: def("lease_units_dropped"), overLimitHit: def("over_limit_cache_hits")}
	return errs
}

// spend decides the request from the VM's lease on key, if it holds enough unexpired units,
// and reports whether it did; expired units are given back here.
func (l *leaseState) spend(a *applied, key []byte, now, cost int64) bool {
	h := l.held[string(key)] // no allocation: the compiler converts for the lookup only
	if h == nil {
		return false
	}
	if h.units > 0 && now >= h.expires {
		l.release(h, now)
	}
	if h.units < cost || cost <= 0 {
		return false
	}
	h.units -= cost
	h.used += cost
	a.decision = algorithms.Decision{Allowed: true, Limit: h.limit,
		Remaining: h.remaining + h.units, ResetAfter: time.Duration(max(0, h.resetAt-now))}
	a.decided, a.leased = true, h
	return true
}

// release gives h's unspent units back at now: a local rule's to the key's state (dropped and
// counted when it takes nothing back); a global rule's wait in h.give for the key's next take.
func (l *leaseState) release(h *heldLease, now int64) {
	n := h.units
	if n <= 0 {
		return
	}
	h.units = 0
	if l.table == nil {
		h.give += n
		return
	}
	if err := l.table.GiveBack([]byte(h.key), now, h.at, n, &l.give); err == nil && l.give.Decision.Allowed {
		l.m.returned.Increment(uint64(n))
		return
	}
	l.m.dropped.Increment(uint64(n))
}

// forget drops the units h, no longer the key's lease, still holds or waits to give back.
func (l *leaseState) forget(h *heldLease, now int64) {
	l.release(h, now)
	if h.give > 0 {
		l.m.dropped.Increment(uint64(h.give))
		h.give = 0
	}
}

// reserve returns how many units beyond cost a take for key at now may reserve: at most
// batch-cost, and at most what this VM is expected to spend within ttl at its arrival rate
// since its previous take (a new key: batch-cost). A global rule, whose call has no cap of
// Table.Take's, caps it here at 1/LeaseShare of the remaining allowance its previous take saw
// (of the capacity for a new key). A new key while the map is full of unexpired leases
// reserves nothing: the reserve could not be held.
func (l *leaseState) reserve(key []byte, now, cost int64) int64 {
	want := l.batch - cost
	h := l.held[string(key)]
	if h == nil {
		l.expire(now)
		if len(l.held) >= maxHeld {
			return 0
		}
		if l.table == nil {
			want = min(want, l.capacity/sharedstate.LeaseShare)
		}
		return max(want, 0)
	}
	if l.table == nil {
		want = min(want, h.remaining/sharedstate.LeaseShare)
	}
	if dt := now - h.takenAt; dt < l.ttl {
		// used arrived within dt: at that rate, ttl sees used*ttl/dt (float: no overflow).
		want = min(want, int64(float64(h.used)*float64(l.ttl)/float64(max(dt, 1))))
	} else {
		want = min(want, h.used)
	}
	return max(want, 0)
}

// taken records a committed take at now of n units of which the request spent cost, d being
// the decision for all n. It returns the request's decision (the remaining allowance as if the
// reserve were unspent, as an exact decision reports it) and the lease.
func (l *leaseState) taken(key []byte, now, n, cost int64, d algorithms.Decision) (algorithms.Decision, *heldLease) {
	// Every take looks for expired leases, so that their units go back soon after their ttl.
	l.expire(now)
	old := l.held[string(key)]
	if old == nil {
		if len(l.held) >= maxHeld {
			// No room (the map filled while the take was out): the debited reserve goes back.
			if n > cost {
				l.forget(&heldLease{key: string(key), units: n - cost, takenAt: now, at: now}, now)
			}
			return d, nil
		}
	} else if old.units > 0 || old.give > 0 {
		// Units left from an earlier take go back.
		l.forget(old, now)
	}
	// A fresh lease, never the old one reused: a request paused on Redis may still refund its
	// units into the old one, and in a lease taken since they would go beyond the stated
	// bound (refund gives them back instead). Takes are rare, so the allocation stays off the
	// spend path.
	h := &heldLease{units: n - cost, expires: now + l.ttl, takenAt: now, at: now, used: cost,
		remaining: d.Remaining, limit: d.Limit, resetAt: now + int64(d.ResetAfter)}
	if old != nil {
		h.key = old.key
	} else {
		h.key = string(key)
	}
	l.held[h.key] = h
	l.order = append(l.order, h)
	if n > cost {
		l.m.taken.Increment(1)
	}
	d.Remaining += h.units
	return d, h
}

// refund gives a request's units back to their lease when another rule denied the request, or
// to the key's state (release) if the lease has since been replaced or expired.
func (l *leaseState) refund(h *heldLease, cost int64, now int64) {
	if h == nil || l.held == nil {
		return
	}
	h.used -= cost
	if l.held[h.key] == h && now < h.expires {
		h.units += cost
		return
	}
	l.forget(&heldLease{key: h.key, units: cost, takenAt: h.takenAt, at: h.at}, now)
}

// expire forgets the leases whose ttl has passed, oldest first, giving their units back: each
// lease is visited once, so a take costs a bounded amount on average.
func (l *leaseState) expire(now int64) {
	for l.head < len(l.order) {
		h := l.order[l.head]
		if now < h.expires {
			break
		}
		l.order[l.head] = nil
		l.head++
		if l.held[h.key] == h {
			l.forget(h, now)
			delete(l.held, h.key)
		}
	}
	if l.head > 64 && l.head*2 > len(l.order) {
		// Reuse the front of the slice: the live part moves down once it is the smaller half.
		n := copy(l.order, l.order[l.head:])
		clear(l.order[n:])
		l.order, l.head = l.order[:n], 0
	}
}

// overLimitCache remembers, for a global rule with a lease block, the keys Redis denied and
// until when: a request for such a key costing at least as much is denied with no callout
// until then. That is exact: Redis's RetryAfter is the earliest instant the same request could
// pass, other traffic only pushes it later, and a larger cost needs at least as long. It
// counts from the callout's send, so it never outlasts Redis's answer. A denial on the
// overflow key is not the key's and is not kept.
type overLimitCache struct {
	denied map[string]overLimit
}

// overLimit is one cached denial: until when, for requests costing at least cost.
type overLimit struct {
	until, resetAt, limit, cost int64
}

// overLimitProbes is how many entries a full over-limit cache looks at to make room.
const overLimitProbes = 16

// hit reports whether the cache denies the request, and the denial to send.
func (c *overLimitCache) hit(key []byte, now, cost int64) (algorithms.Decision, bool) {
	e, ok := c.denied[string(key)]
	if !ok || now >= e.until || cost < e.cost {
		return algorithms.Decision{}, false
	}
	return algorithms.Decision{Limit: e.limit, RetryAfter: time.Duration(e.until - now),
		ResetAfter: time.Duration(max(e.resetAt, e.until) - now)}, true
}

// record remembers Redis's denial of key for cost, decided on a callout sent at sentAt, unless
// it is unsatisfiable (RetryAfter 0: the rule's own check refuses it).
func (c *overLimitCache) record(key []byte, sentAt, cost int64, d algorithms.Decision) {
	if d.Allowed || d.RetryAfter <= 0 {
		return
	}
	if _, ok := c.denied[string(key)]; !ok && len(c.denied) >= maxHeld {
		// Full: a few entries are looked at (map iteration starts at a random one) and the
		// expired among them forgotten. A denial not cached is decided by Redis next time.
		seen := 0
		for k, e := range c.denied {
			if sentAt >= e.until {
				delete(c.denied, k)
			}
			if seen++; seen == overLimitProbes {
				break
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
			a.rs.lease.refund(a.leased, a.cost, h.plugin.now())
			a.leased = nil
		}
	}
}

// inCall reports whether the rule has a part in the request's Redis call: a global rule that
// no lease of this VM admitted.
func (a *applied) inCall() bool { return a.rs.rule.Scope == config.ScopeGlobal && !a.spent }

// callN is what the rule's item in the Redis call debits: a lease's batch, or the cost.
func (a *applied) callN() int64 { return max(a.take, a.cost) }

// batchDenied reports whether Redis denied an enforced rule's lease batch: the request's own
// cost must then be decided again, since an exact decision could admit it.
func (a *applied) batchDenied() bool {
	return a.take > a.cost && !a.decision.Allowed && !a.rs.rule.Shadow
}

// leaseGlobal admits the request for a global rule from this VM's lease on the key when it
// holds enough unexpired units, and reports whether it did; otherwise it sets the batch to ask
// Redis for and the units to give back. Shadow rules take no lease: they observe exact
// decisions, and their denied batch would not be decided again in the same call.
func (h *httpContext) leaseGlobal(a *applied, now int64) bool {
	l := a.rs.lease
	if l == nil || a.rs.rule.Shadow {
		return false
	}
	if l.spend(a, a.key, now, a.cost) {
		a.spent = true
		return true
	}
	a.take = a.cost + l.reserve(a.key, now, a.cost) // the batch to ask Redis for
	if h := l.held[string(a.key)]; h != nil {
		// The units the VM still holds for the key, or has not given back, go back in the call.
		l.release(h, now)
		a.give, a.givenAt, h.give = h.give, h.at, 0
	}
	return false
}

// gaveBack counts the units the rule's item carried back (applied.give) in a call Redis
// answered: returned when the script applied them (redis.Answer.GaveBack), else dropped.
func (a *applied) gaveBack(took bool) {
	if a.give > 0 {
		if took {
			a.rs.lease.m.returned.Increment(uint64(a.give))
		} else {
			a.rs.lease.m.dropped.Increment(uint64(a.give))
		}
		a.give = 0
	}
}

// saw records a key's remaining allowance as Redis reported it on a denied batch, so that the
// next take on this VM asks for a batch that fits (leaseState.reserve); it holds no units.
func (l *leaseState) saw(key []byte, at int64, d algorithms.Decision) {
	l.taken(key, at, 0, 0, d)
}

// takenGlobal records a global rule's take that Redis committed, as taken does, at sentAt (so
// units expire no later than from Redis's instant). A take on the overflow key was decided for
// the cost alone and gives no lease; the reserve of one answered (at now) after its ttl is
// dropped: held, it would replace the key's live lease, whose units a later take has debited.
func (l *leaseState) takenGlobal(a *applied, sentAt, now int64, answer redis.Answer) (algorithms.Decision, *heldLease) {
	if answer.Overflow {
		return a.decision, nil
	}
	if now >= sentAt+l.ttl {
		if a.take > a.cost {
			l.m.dropped.Increment(uint64(a.take - a.cost))
		}
		return a.decision, nil
	}
	d, h := l.taken(a.key, sentAt, a.take, a.cost, a.decision)
	if h != nil {
		h.at = answer.Now
	}
	return d, h
}

// recordTakes records the take of every leased global rule in the request's committed call
// (answered at now; c.answers in rule order).
func (h *httpContext) recordTakes(d *decisions, now int64) {
	answers := h.plugin.redis.answers
	j := 0
	for i := range d.applied {
		a := &d.applied[i]
		if !a.inCall() {
			continue
		}
		var answer redis.Answer
		if j < len(answers) {
			answer = answers[j]
		}
		j++
		if a.take > 0 && a.decided && a.decision.Allowed {
			a.decision, a.leased = a.rs.lease.takenGlobal(a, d.sentAt, now, answer)
		}
	}
}
