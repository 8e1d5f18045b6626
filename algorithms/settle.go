package algorithms

// A usage cost is known only after the response: a request is admitted with a reservation (an
// ordinary AllowN of the reserved units), and when its stream ends the key's state is settled
// by delta = usage - reservation. Settle applies that delta, as a pure function of the state,
// the instant and the delta, like AllowN.
//
//   - delta < 0 is a refund: the units the request reserved and did not use go back.
//   - delta > 0 is a debt: units beyond the reservation are taken, whatever the state holds.
//     A bucket or GCRA key may go below empty, a window's count above its limit; the key is
//     then denied until the debt is repaid at the rule's rate (a window repays its limit per
//     window).
//
// # Arithmetic, per algorithm (the spec for the Lua port)
//
// Token bucket and leaky bucket meter (the bucket both share; the meter stores capU - tokens):
// the bucket is first refilled to eff = max(now, last) as AllowN does. A balance below empty
// is written as an empty-ish bucket whose last refill lies in the future: (tokens, last) with
// last > now means tokens - (last - t)*lg units at any t <= last, which is what AllowN already
// reads (a call before last is evaluated at last), so no decoder changes.
//
//	debt, u = delta*wg:
//	    if tokens >= u: store (tokens - u, eff)
//	    else: q = ceil((u - tokens) / lg); store (q*lg + tokens - u, eff + q)
//	          -- but (0, max(eff, now + 2^52)) when eff + q > now + 2^52
//	refund, u = -delta*wg:
//	    if eff <= now: store (min(tokens + u, capU), eff)
//	    elif floor(u/lg) < eff - now:            -- still in the future: last moves back
//	        tokens = tokens + u mod lg; eff = eff - floor(u/lg)
//	        if tokens >= lg and eff - 1 > now: tokens = tokens - lg; eff = eff - 1
//	        store (min(tokens, capU), eff)
//	    else: store (min(tokens + u - (eff - now)*lg, capU), now)
//
// The stored tokens of a debt are below lg <= wg (CheckUsage requires at most one unit per
// nanosecond, lg <= wg), so no request passes before the debt is repaid.
//
// GCRA: with base = max(TAT, now),
//
//	delta > 0:   TAT' = min(base + delta*T, max(TAT, now + 2^52))
//	delta < 0:   TAT' = max(TAT + delta*T, now)   when TAT > now; else unchanged (the key is full)
//
// Fixed window: the count and carry of the current window w, after the roll of a decision
// (which carries a count beyond L into the following windows: carry is the part of count ended
// windows charged). A settlement for a reservation counted in w changes count; one for a
// reservation counted in an ended window (start(reservedAt) < w) changes the carry too, and a
// refund then comes off the carry only: what that window counted within L was counted against
// its admissions and is not given back, so the current window never admits beyond L.
//
//	delta > 0:   count = min(count + delta, ceil);  if ended: carry = min(carry + delta, count)
//	delta < 0:   if ended: x = min(-delta, carry); count = count - x; carry = carry - x
//	             else:     count = max(count + delta, 0); carry = min(carry, count)
//
// Sliding window counter: as the fixed window, for cur; and for a reservation counted in the
// previous window (start(reservedAt) == w - W), what the carry cannot take of a refund comes
// off prev: prev = max(prev + delta + x, 0).
//
// A state recorded under other parameters (the configuration changed while the stream was
// open) is not settled: Settle returns ok false, and the caller writes nothing.

// maxDebtAhead bounds how far ahead of now a debt may push a key's schedule (about 52 days):
// debts of many streams settled while the key is denied add up, and a bucket's last refill
// or a GCRA TAT must stay a valid timestamp (MaxTime, maxStamp). What lies beyond is forgiven.
const maxDebtAhead = 1 << 52

// debtCeiling is the most a window key's count holds, its debt included: what the windows of
// maxDebtAhead repay (at least two windows' worth), within the uint32 it is stored in. It
// keeps every RetryAfter and ResetAfter below 2^53 ns. What lies beyond is forgiven.
func debtCeiling(limit, w int64) int64 {
	return min(1<<32-1, limit*max(2, maxDebtAhead/w))
}

// Settle applies delta = usage - reservation to state at now, for a request whose
// reservation was admitted at reservedAt (see above). It returns the state to store (aliasing
// state as AllowN's does) and whether there is one: not for delta 0, a refund on a fresh or
// full key or that a window's counts cannot take, a state recorded under other parameters, or
// a limiter that takes no usage cost.
func Settle(lim Limiter, state []byte, now, reservedAt, delta int64) ([]byte, bool) {
	if delta == 0 {
		return state, false
	}
	now = clampNow(now)
	switch l := lim.(type) {
	case *TokenBucket:
		return l.settle(state, now, delta)
	case *LeakyBucket:
		if !l.shaper {
			return l.b.settle(state, now, delta)
		}
	case *GCRA:
		return l.settle(state, now, delta)
	case *FixedWindow:
		return l.settle(state, now, reservedAt, delta)
	case *SlidingWindowCounter:
		return l.settle(state, now, reservedAt, delta)
	}
	return state, false
}

// CheckUsage reports whether a rule of configuration c can take a usage cost whose
// settlements are at most max units: its algorithm must be able to give units back and take
// them beyond its capacity, and its arithmetic must stay exact with max more units. The
// error's Field is "algorithm", "variant", "max_delay" or "max" (the cost's).
func CheckUsage(c Config, max int64) error {
	switch {
	case c.Algorithm == AlgAdaptive:
		return cfgErr("algorithm", "adaptive takes no usage cost: its limit moves while reservations are open")
	case c.Algorithm == AlgSlidingWindow && c.Variant == VariantLog:
		return cfgErr("variant", `the sliding window "log" takes no usage cost: it records one timestamp per unit, and a unit known only after the response has no instant`)
	case c.Algorithm == AlgLeakyBucket && c.MaxDelay > 0:
		return cfgErr("max_delay", `a shaping leaky bucket takes no usage cost: a request's delay is fixed before its usage is known`)
	}
	if max < 1 || max > LimitCeiling {
		return cfgErr("max", "must be in [1, 1000000000]")
	}
	switch c.Algorithm {
	case AlgTokenBucket, AlgLeakyBucket:
		lg, wg := rateScale(c.Limit, c.Window)
		if lg > wg {
			return cfgErr("limit", "a usage cost needs a rate of at most one unit per nanosecond (limit <= window in ns)")
		}
		return checkExact("max", "(capacity + max)*window/gcd(limit, window in ns) + 2*limit/gcd",
			"lower the cost's max or the burst", [2]int64{c.Capacity() + max, wg}, [2]int64{2, lg})
	case AlgGCRA:
		t := int64(c.Window) / c.Limit
		return checkExact("max", "(burst + max + 1)*window/limit", "lower the cost's max or the burst",
			[2]int64{c.Capacity() + max + 1, t})
	}
	return nil
}

// settle is Settle for the token bucket and the leaky bucket meter.
func (b *bucket) settle(state []byte, now, delta int64) ([]byte, bool) {
	off, conv := b.locate(state)
	if conv {
		return state, false
	}
	tokens, eff, ok := b.load(state, off, now)
	if !ok && delta < 0 || delta < 0 && tokens == b.capU && eff <= now {
		return state, false // fresh or full: nothing to give back
	}
	tokens, eff = b.settleTokens(tokens, eff, now, delta)
	return b.encode(state, tokens, eff), true
}

// settleTokens applies delta to tokens evaluated at eff; see the arithmetic above.
func (b *bucket) settleTokens(tokens, eff, now, delta int64) (int64, int64) {
	if delta > 0 {
		u := delta * b.wg
		if tokens >= u {
			return tokens - u, eff
		}
		q := ceilDiv(u-tokens, b.lg)
		if eff+q > now+maxDebtAhead {
			return 0, max(eff, now+maxDebtAhead)
		}
		return q*b.lg + tokens - u, eff + q
	}
	u := -delta * b.wg
	if eff <= now {
		return min(tokens+u, b.capU), eff
	}
	// A refund into a balance that lies in the future: last moves back by u/lg ns, and when
	// it reaches now the balance is expressed at now.
	if s, rem := u/b.lg, u%b.lg; s < eff-now {
		tokens, eff = tokens+rem, eff-s
		if tokens >= b.lg && eff-1 > now {
			tokens, eff = tokens-b.lg, eff-1
		}
		return min(tokens, b.capU), eff
	}
	return min(tokens+u-(eff-now)*b.lg, b.capU), now
}

// settle is Settle for GCRA.
func (g *GCRA) settle(state []byte, now, delta int64) ([]byte, bool) {
	off, conv := g.locate(state)
	if conv {
		return state, false
	}
	tat, ok := g.decode(state, off)
	if !ok {
		tat = now
	}
	switch {
	case delta > 0:
		tat = min(max(tat, now)+delta*g.t, max(tat, now+maxDebtAhead))
	case tat > now:
		tat = max(tat+delta*g.t, now)
	default:
		return state, false
	}
	return g.encode(state, tat), true
}

// settleCount applies delta to a window's count and carry (see the arithmetic above), for a
// reservation counted in an ended window or not; rest is what the carry did not take of an
// ended window's refund.
func settleCount(count, carry, delta, ceil int64, ended bool) (c, cy, rest int64) {
	switch {
	case delta > 0:
		count = min(count+delta, ceil)
		if ended {
			carry = min(carry+delta, count)
		}
		return count, carry, 0
	case !ended:
		count = max(count+delta, 0)
		return count, min(carry, count), 0
	}
	x := min(-delta, carry)
	return count - x, carry - x, -delta - x
}

// settle is Settle for the fixed window.
func (f *FixedWindow) settle(state []byte, now, reservedAt, delta int64) ([]byte, bool) {
	off, conv := f.locate(state)
	if conv {
		return state, false
	}
	w, count, carry := f.load(state, off, now)
	c, cy, _ := settleCount(count, carry, delta, f.ceil, reservedAt-reservedAt%f.w < w)
	if c == count && cy == carry {
		return state, false
	}
	return f.encode(state, w, c, cy), true
}

// settle is Settle for the sliding window counter.
func (s *SlidingWindowCounter) settle(state []byte, now, reservedAt, delta int64) ([]byte, bool) {
	off, conv := s.locate(state)
	if conv {
		return state, false
	}
	ws, prev, cur, carry, ok := s.decode(state, off)
	w, _, prev, cur, carry := s.roll(ws, prev, cur, carry, ok, now)
	rw := reservedAt - reservedAt%s.cc.w
	c, cy, rest := settleCount(cur, carry, delta, s.ceil, rw < w)
	p := prev
	if rw == w-s.cc.w {
		p = max(prev-rest, 0)
	}
	if c == cur && cy == carry && p == prev {
		return state, false
	}
	return s.encode(state, w, p, c, cy), true
}
