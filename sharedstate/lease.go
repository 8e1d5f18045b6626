package sharedstate

import "github.com/ratelimit-wasm/ratelimit/algorithms"

// Operations other than AllowN on a key's state, decided and written like AllowN (Decide's
// placement, Commit's compare-and-swap and retries): a lease (see the filter's lease.go) takes
// a batch of units with Take and gives back what it did not spend with GiveBack; Settle
// charges a usage cost's settlement (algorithms.Settle).
const (
	opAllow = iota
	opTake
	opGiveBack
	opSettle
)

// Take decides a lease take on key at now: the request's own cost, and, when that is admitted
// in the key's own slot, up to reserve more units, but no more than 1/LeaseShare of what
// remains after the cost, so that LeaseShare holders taking at once reserve at most what
// remains. Pending.Reserved reports the units reserved beyond the cost; Decision is the decision for
// cost + Reserved. A denial is the exact decision for the cost alone, so a take never denies
// what AllowN admits. Commit writes it.
func (t *Table) Take(key []byte, now, cost, reserve int64, p *Pending) error {
	return t.begin(p, key, opTake, now, cost, reserve)
}

// LeaseShare is the number of holders a lease take assumes may take at once (eight worker VMs,
// a typical Envoy --concurrency).
const LeaseShare = 8

// GiveBack returns n units that a take admitted at takenAt debited for key and that were never
// spent (see algorithms.Returner), and writes the key's state. It writes nothing when the
// algorithm takes nothing back, when the key has no state of its own (a fresh key, or one
// counted in an overflow slot), or when the units no longer weigh in the state.
func (t *Table) GiveBack(key []byte, now, takenAt, n int64, p *Pending) error {
	if err := t.begin(p, key, opGiveBack, now, n, takenAt); err != nil {
		return err
	}
	return t.Commit(p)
}

// Settle charges delta units (a refund when negative) to key's state for a reservation
// admitted at reservedAt, with algorithms.Settle, and writes the state. A key that lost its
// slot is placed again, as a decision places it. It writes nothing when the table's limiter
// cannot settle or the settlement leaves the state as it is.
func (t *Table) Settle(key []byte, now, reservedAt, delta int64, p *Pending) error {
	if err := t.begin(p, key, opSettle, now, delta, reservedAt); err != nil {
		return err
	}
	return t.Commit(p)
}

// runLease is run's limiter call for Take, GiveBack and Settle.
func (t *Table) runLease(p *Pending, state []byte) (algorithms.Decision, []byte) {
	p.Reserved = 0
	if p.op == opSettle {
		lim, ok := t.limiter.(algorithms.Limiter)
		if !ok {
			return algorithms.Decision{}, state
		}
		next, changed := algorithms.Settle(lim, state, p.now, p.arg, p.n)
		return algorithms.Decision{Allowed: changed}, next
	}
	if p.op == opGiveBack {
		r, ok := t.limiter.(algorithms.Returner)
		if !ok || len(state) == 0 || p.Overflow {
			return algorithms.Decision{}, state
		}
		next, changed := r.GiveBack(state, p.now, p.arg, p.n)
		return algorithms.Decision{Allowed: changed}, next
	}
	// AllowN may write its result over state: the batch is decided on a copy of what was read.
	t.probe = append(t.probe[:0], state...)
	d, next := t.limiter.AllowN(state, p.now, p.n)
	if !d.Allowed || p.Overflow || p.arg <= 0 {
		return d, next
	}
	extra := min(p.arg, d.Remaining/LeaseShare)
	if extra <= 0 {
		return d, next
	}
	if db, nb := t.limiter.AllowN(t.probe, p.now, p.n+extra); db.Allowed {
		p.Reserved = extra
		return db, nb
	}
	return d, next
}
