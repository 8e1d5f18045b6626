package algorithms

// Giving back units: a lease (see the filter's lease.go) debits a batch of units with one
// admitted AllowN and spends them later from memory; the units it did not spend when its ttl
// passes are given back to the key's state with GiveBack, so that they are not lost to the
// key's other requests.
//
// A give-back never makes a state admit more than the algorithm's contract. The units it
// returns were debited by an admitted decision and never admitted a request, so over any
// interval the admissions are still at most the debits minus the returns, which the
// algorithm bounds as before (a token bucket: at most B + rate*t; a window: Limit per
// window). Each algorithm returns at most what the units still weigh in its state:
//
//   - TokenBucket and the LeakyBucket meter: tokens = min(capU, tokens + n*wg) after the
//     refill to max(now, last) (the meter: level = max(0, level - n*wg));
//   - GCRA: TAT = max(now, TAT - n*T);
//   - FixedWindow: count = max(0, count - n), carry = min(carry, count), only while the
//     stored window is the one takenAt fell in and is not older than now's (a window that has
//     ended has forgotten the units); count is read up to the debt ceiling, not the limit, so
//     a give-back forgives no usage debt;
//   - SlidingWindowCounter: after rolling to now, cur = max(0, cur - n) when takenAt fell in
//     now's window, prev = max(0, prev - n) when it fell in the window before, nothing when
//     older; carry = min(carry, cur).
//
// GiveBack changes only a state in the limiter's current encoding recorded under its own
// parameters; any other state (a fresh key, the v1 layout, a configuration change, the shaper)
// is left as it is, which only under-admits. It reports whether it changed the state; the
// returned slice aliases state when cap(state) >= StateSize(), as for AllowN.

// Returner is implemented by the limiters whose state can take back unspent units.
type Returner interface {
	// GiveBack returns state with n units given back at now, units that an admitted
	// decision at takenAt debited and no request spent, and whether it changed anything.
	GiveBack(state []byte, now, takenAt, n int64) ([]byte, bool)
}

// GiveBack implements Returner for the token bucket and the leaky bucket meter.
func (b *bucket) GiveBack(state []byte, now, takenAt, n int64) ([]byte, bool) {
	if off, _ := b.locate(state); n <= 0 || off != hdrSize {
		return state, false
	}
	tokens, eff, ok := b.load(state, hdrSize, clampNow(now))
	if !ok || tokens >= b.capU {
		return state, false
	}
	if n >= b.capacity {
		return b.encode(state, b.capU, eff), true
	}
	return b.encode(state, min(b.capU, tokens+n*b.wg), eff), true
}

// GiveBack implements Returner for the meter; the shaper's schedule takes nothing back.
func (l *LeakyBucket) GiveBack(state []byte, now, takenAt, n int64) ([]byte, bool) {
	if l.shaper {
		return state, false
	}
	return l.b.GiveBack(state, now, takenAt, n)
}

// GiveBack implements Returner.
func (g *GCRA) GiveBack(state []byte, now, takenAt, n int64) ([]byte, bool) {
	if n <= 0 || len(state) != gcraSize || !g.p.matches(state, verGCRA2) {
		return state, false
	}
	tat, ok := g.decode(state, hdrSize)
	now = clampNow(now)
	if !ok || tat <= now {
		return state, false
	}
	if n >= g.burst {
		return g.encode(state, now), true
	}
	return g.encode(state, max(now, tat-n*g.t)), true
}

// GiveBack implements Returner.
func (f *FixedWindow) GiveBack(state []byte, now, takenAt, n int64) ([]byte, bool) {
	if off, _ := f.locate(state); n <= 0 || off != hdrSize {
		return state, false
	}
	now, takenAt = clampNow(now), clampNow(takenAt)
	// The stored window, not rolled to now's (load returns another one then), is takenAt's.
	w, count, carry := f.load(state, hdrSize, now)
	if w != get64(state[hdrSize:]) || w != takenAt-takenAt%f.w || count <= 0 {
		return state, false
	}
	count = max(0, count-n)
	return f.encode(state, w, count, min(carry, count)), true
}

// GiveBack implements Returner.
func (s *SlidingWindowCounter) GiveBack(state []byte, now, takenAt, n int64) ([]byte, bool) {
	if off, _ := s.locate(state); n <= 0 || off != hdrSize {
		return state, false
	}
	now, takenAt = clampNow(now), clampNow(takenAt)
	ws, prev, cur, carry, ok := s.decode(state, hdrSize)
	if !ok {
		return state, false
	}
	w, _, prev, cur, carry := s.roll(ws, prev, cur, carry, true, now)
	switch tw := takenAt - takenAt%s.cc.w; {
	case tw == w && cur > 0:
		cur = max(0, cur-n)
	case tw == w-s.cc.w && prev > 0:
		prev = max(0, prev-n)
	default:
		return state, false
	}
	return s.encode(state, w, prev, cur, min(carry, cur)), true
}
