package config

import (
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// Lease is a rule's lease block: how many units a worker VM may reserve for a key at once and
// how long it may keep them. A rule without a lease block decides every request on the shared
// state; with one, a VM debits a batch of units in one write and spends them from its memory,
// trading at most (lease holders x batch) units of accuracy within an interval for fewer
// shared-data writes (see the README's lease section for the bound).
type Lease struct {
	// Batch is the largest number of units one take reserves. The filter takes fewer as the
	// key's remaining allowance falls, and exactly the request's cost near the limit.
	Batch int64
	// TTL is how long reserved units stay spendable; unspent units then go back to the key's
	// state where the algorithm allows it (docs/leases.md states the bounds).
	TTL time.Duration
}

// Lease bounds. A batch of 1 is exact and pointless, so the smallest is 2; the longest ttl
// keeps the excess a lease can carry from one window into the next short.
const (
	MinLeaseBatch   = 2
	MaxLeaseBatch   = 1_000_000
	DefaultLeaseTTL = time.Second
	MaxLeaseTTL     = time.Minute
)

var leaseFields = []string{"batch", "ttl"}

// lease parses a rule's lease block. It refuses the block for the algorithms where reserving
// units ahead is not sound: the sliding window log records one timestamp per event, so a
// batch would be logged at the instant of the take rather than of each request; a shaper
// schedules each request's release; the adaptive limit changes under the lease. A shadow rule
// exists to observe exact decisions and takes no lease, so a lease block there would be
// ignored: it is refused.
func (p *parser) lease(path string, n *node, r *Rule) *Lease {
	f, ok := p.object(path, n, leaseFields...)
	if !ok {
		return nil
	}
	l := &Lease{TTL: DefaultLeaseTTL}
	valid := need(p, f, "batch", "", MinLeaseBatch, MaxLeaseBatch, &l.Batch, p.integer)
	valid = opt(f, "ttl", time.Millisecond, MaxLeaseTTL, &l.TTL, p.duration) && valid
	a := r.Algorithm
	switch {
	case a.Algorithm == algorithms.AlgAdaptive:
		p.add(path, "not supported by algorithm adaptive: its limit changes while units are reserved")
		valid = false
	case a.Algorithm == algorithms.AlgSlidingWindow && a.Variant == algorithms.VariantLog:
		p.add(path, `not supported by sliding_window variant "log": it records one timestamp per request`)
		valid = false
	case r.Mode == ModeShape:
		p.add(path, `not supported in mode "shape": the shaper schedules each request's release`)
		valid = false
	case r.CostSpec.Usage != nil:
		p.add(path, "not with a usage cost: a request's units are settled on the rule's state when its stream ends")
		valid = false
	case r.Shadow:
		p.add(path, "not supported on a shadow rule: it observes exact decisions and takes no lease")
		valid = false
	}
	if !valid {
		return nil
	}
	return l
}
