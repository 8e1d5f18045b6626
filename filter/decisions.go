package filter

import (
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// applied is one rule's part in the current request.
type applied struct {
	rs       *ruleState
	decision algorithms.Decision
	// decided is false while a global rule waits for Redis, and for a rule whose state could
	// not be read under failure_mode "allow" (it then adds no headers). local is set when the
	// decision was made on this proxy's shared data and still has to be written.
	decided, local bool
	pending        sharedstate.Pending
	// key is the rule's descriptor, kept for a global rule until Redis has answered.
	key  []byte
	cost int64
	// leased is the VM lease that admitted the request (given back if another rule denies
	// it); take is the size of a lease take in flight, 0 for an exact decision; spent is set
	// when a global rule's lease admitted the request (see inCall).
	leased *heldLease
	take   int64
	spent  bool
	// give is how many unspent units of the VM's expired lease on the key the rule's item in
	// the Redis call gives back, units that a take decided at givenAt (Redis' clock) debited.
	give, givenAt int64
	// sentAt is when this rule's own call was sent, with redis.partitions > 1 (one call per
	// rule), and callID its id; the request's single call uses decisions' sentAt and callID.
	sentAt, callID int64
	// overflow is set when Redis decided a global rule on its overflow key, and redisAt is
	// the instant (Redis' clock) it decided at: a usage cost settles there, in that window.
	overflow bool
	redisAt  int64
}

// decisions is the per-request working set, taken from the plugin's free list and given back
// when the request is decided (a request paused on Redis keeps its own until the answer).
type decisions struct {
	applied     []applied
	items       []redis.Item // the items of the request's last Redis call (callItems)
	outstanding int
	// sentAt is when the request's Redis callout was sent; retried is set once it has been
	// resent with the script source after Redis answered NOSCRIPT. callID is the call's id.
	sentAt, callID int64
	retried        bool
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

// giveDecisions returns a request's working set; one with callouts still in flight, or that
// finds no room in the list (warm gives it maxFreeDecisions), is left to the garbage collector.
func (p *plugin) giveDecisions(h *httpContext) {
	d := h.d
	if d == nil {
		return
	}
	h.d = nil
	n := len(p.free)
	if d.outstanding > 0 || n == cap(p.free) {
		return
	}
	d.applied = d.applied[:0]
	d.sentAt, d.retried = 0, false
	p.free = p.free[:n+1]
	p.free[n] = d
}

// maxFreeDecisions bounds the working sets a VM keeps for reuse.
const maxFreeDecisions = 64

// add appends a rule to the set, reusing the buffers of an earlier request.
func (d *decisions) add(rs *ruleState) *applied {
	if len(d.applied) < cap(d.applied) {
		d.applied = d.applied[:len(d.applied)+1]
	} else {
		d.grow()
	}
	a := &d.applied[len(d.applied)-1]
	// Field by field: *a = applied{...} builds the struct aside and copies it back with a
	// typed memmove, about half a microsecond per rule in a Wasm VM. Pending is reset by
	// Table.Decide; every other field starts as in a new applied
	// (TestDecisionsAddResetsEveryField).
	a.rs, a.decision, a.decided, a.local = rs, algorithms.Decision{}, false, false
	a.key, a.cost = a.key[:0], 0
	a.leased, a.take, a.spent, a.sentAt, a.callID = nil, 0, false, 0, 0
	a.give, a.givenAt = 0, 0
	a.overflow, a.redisAt = false, 0
	return a
}

// grow appends an empty applied to a set takeDecisions made on an empty free list (warm's
// has room for every rule), out of add's line, which decideRequest inlines (see doc.go).
//
//go:noinline
func (d *decisions) grow() {
	d.applied = append(d.applied, applied{})
}

// tighter reports whether d is more restrictive than e for the legacy fields: less remaining,
// or as much for longer (else a client with nothing left under a 1 s rule and a 1 min rule
// would be told to come back after a second, to be denied for 59 more).
func tighter(d, e *algorithms.Decision) bool {
	return d.Remaining < e.Remaining || d.Remaining == e.Remaining && d.ResetAfter > e.ResetAfter
}
