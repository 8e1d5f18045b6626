package algorithms

// LeakyBucket is leaky_bucket. It has two modes.
//
// # Meter (MaxDelay == 0)
//
// The leaky bucket as a meter (Turner's formulation; Tanenbaum's leaky bucket is the queue,
// below): an occupancy level drains continuously at Limit/Window events per second; n events
// are admitted while occupancy + n <= C (C = Burst, Limit when 0), and then raise the
// occupancy by n. Requests are allowed or denied at once, never delayed.
// The meter makes exactly the decisions of a TokenBucket with the same parameters (tokens =
// C - occupancy); a test checks that.
//
// Arithmetic, with g, lg, wg, capU = C*wg and need = n*wg as for TokenBucket:
//
//	state: level (units, 0..capU), last (absolute ns)
//	fresh: level = 0, last = now
//	eff = max(now, last); elapsed = eff - last
//	if level > 0:
//	    empty = floor((level + lg - 1) / lg)        -- ns until empty
//	    level = 0 if elapsed >= empty else level - elapsed*lg
//	if n <= 0 or n > C: unsatisfiable (state unchanged)
//	allowed = level + need <= capU;  if allowed: level = level + need
//	RetryAfter = (eff-now) + floor((level + need - capU + lg - 1) / lg)   when denied
//	Remaining  = floor((capU - level) / wg)
//	ResetAfter = (eff-now) + floor((level + lg - 1) / lg)
//	store (level, eff)
//
// Meter state layout (41 bytes): [0] 0x23, [1:25] parameter block (limit, capacity C, window,
// max_delay 0; see RecordedConfig), [25:33] level int64 LE (units of 1/wg event), [33:41] last
// int64 LE (Unix ns). v1: 17 bytes, 0x21, level, last.
//
// # Shaper (MaxDelay > 0)
//
// A request that finds the bucket busy is not denied: it is allowed with a Delay after which
// the caller releases it, and the released stream leaves at exactly the leak rate. The
// limiter keeps a virtual FIFO queue that drains at Limit/Window: each request's release time
// is
//
//	release = max(now, previous release + n*Window/Limit)
//
// (a rational instant; Delay is its ceiling in ns minus now), so consecutive releases are at
// least n*Window/Limit apart, n being the size of the later request, and a request that
// arrives after enough idle time passes at once. A request is denied instead, with
// RetryAfter, when its exact delay would exceed MaxDelay, or when the amount queued at its
// release ((release - now)*Limit/Window events, its own n included) would exceed C. Both
// bounds are one: delay <= D = min(MaxDelay, C*Window/Limit).
//
// Arithmetic. The previous release P is kept as a pair (pns, pfrac) meaning pns + pfrac/lg ns,
// 0 <= pfrac < lg, so that P + n*Window/Limit = P + n*wg/lg stays exact. With
// DU = min(MaxDelay*lg, C*wg) (MaxDelay*lg is only formed when MaxDelay < ceil(C*wg/lg)),
// qD = floor(DU/lg), rD = DU mod lg (so D = qD + rD/lg ns), and E = C*wg - DU:
//
//	fresh: allowed, Delay 0, store (now, 0)
//	if n <= 0 or n > C: unsatisfiable (state unchanged)
//	s = pfrac + n*wg;  qns = pns + floor(s/lg);  qfrac = s mod lg     -- Q = P + n*wg/lg
//	if qns < now or (qns == now and qfrac == 0):                        -- Q <= now
//	    allowed, Delay 0, store (now, 0)
//	else d = qns - now:
//	    if d < qD or (d == qD and qfrac <= rD):                         -- Q - now <= D
//	        allowed, Delay = d + (1 if qfrac > 0 else 0), store (qns, qfrac)
//	    else denied, RetryAfter = qns - qD + (1 if qfrac > rD else 0) - now
//	Remaining (from the stored P, after the decision; C when fresh):
//	    z = now + qD - pns
//	    0 if z < 0;  C if z > ceil(C*wg/lg);  else min(C, max(0, z*lg + rD - pfrac) / wg)
//	ResetAfter (until Remaining == C): s = pfrac + E; ceil(pns + s/lg) - now, at least 0
//
// The largest intermediate is C*wg + 3*lg, which New keeps <= 2^53.
//
// Shaper state layout (37 bytes): [0] 0x24, [1:25] parameter block (limit, capacity C,
// window, max_delay), [25:33] pns int64 LE (Unix ns), [33:37] pfrac uint32 LE (units of 1/lg
// ns; lg <= LimitCeiling < 2^32). v1: 13 bytes, 0x22, pns, pfrac.
//
// # Configuration changes
//
// The meter and the shaper use different version bytes, and a state recorded under other
// parameters, by the other mode or by another algorithm, is converted first (see the package
// documentation). With R = min(R_old, C), the key has consumed C' = C - R at tc:
//
//	meter:  level = C'*wg, last = tc
//	shaper: P = tc + C'*Window/Limit, that is pns = tc + floor(C'*wg/lg), pfrac = C'*wg mod lg
//
// The shaper's P is the release of the last queued request: C' events are queued at tc, so
// its Remaining is exactly R when MaxDelay does not bind (less when it does). Unlike a fresh
// key, whose first request leaves at once, every request after a conversion is spaced from P.
type LeakyBucket struct {
	b      bucket
	shaper bool
	// shaper constants
	qD, rD, e, capNs int64
}

const (
	shaperSize   = hdrSize + 12
	shaperSizeV1 = 13
)

// init validates c and sets l up (newLimiter, and peekOld by value).
func (l *LeakyBucket) init(c Config) error {
	if err := validateCommon(c, LimitCeiling); err != nil {
		return err
	}
	if c.MaxDelay < 0 {
		return cfgErr("max_delay", "must be >= 0 (0 turns shaping off), got "+c.MaxDelay.String())
	}
	if c.MaxDelay > MaxWindow {
		return cfgErr("max_delay", "must be <= "+MaxWindow.String()+" (31 days), got "+c.MaxDelay.String())
	}
	b, err := newBucket(c, verLeakyMeter2, verLeakyMeter)
	if err != nil {
		return err
	}
	*l = LeakyBucket{b: b, shaper: c.MaxDelay > 0}
	if l.shaper {
		if err := checkExact(c.CapacityField(), "capacity*window/gcd(limit, window in ns) + 3*limit/gcd",
			"lower the burst or the window, or pick a limit that shares more factors with the window in ns",
			[2]int64{b.capacity, b.wg}, [2]int64{3, b.lg}); err != nil {
			return err
		}
		l.capNs = ceilDiv(b.capU, b.lg)
		du := b.capU
		if md := int64(c.MaxDelay); md < l.capNs {
			du = md * b.lg
		}
		l.qD, l.rD, l.e = du/b.lg, du%b.lg, b.capU-du
	}
	return nil
}

// Shaping reports whether the limiter delays requests (MaxDelay > 0) rather than only admitting
// or denying them.
func (l *LeakyBucket) Shaping() bool { return l.shaper }

// AllowN implements Limiter; see the type documentation for the arithmetic of both modes.
func (l *LeakyBucket) AllowN(state []byte, now int64, n int64) (Decision, []byte) {
	if !l.shaper {
		return l.b.AllowN(state, now, n)
	}
	return l.shape(state, clampNow(now), n)
}

// locate classifies state for the meter or the shaper; see params.locate.
func (l *LeakyBucket) locate(state []byte) (off int, convert bool) {
	if !l.shaper {
		return l.b.locate(state)
	}
	return l.b.p.locate(state, verLeakyShaper2, shaperSize, shaperSize, verLeakyShaper, shaperSizeV1)
}

// converted is the shaper's state of a key that consumed c at tc; see the type documentation.
func (l *LeakyBucket) converted(c, tc int64) []byte {
	u := c * l.b.wg
	return l.encodeShaper(nil, tc+u/l.b.lg, u%l.b.lg)
}

// peek reports Remaining at now and the instant it was evaluated at, for a state in l's
// current encoding with l's parameters: the meter's free room at max(now, last), the
// shaper's Remaining at now (it keeps no "last seen" instant).
func (l *LeakyBucket) peek(state []byte, now int64) (r, at int64, ok bool) {
	if !l.shaper {
		return l.b.peek(state, now)
	}
	if off, _ := l.locate(state); off != hdrSize {
		return 0, 0, false
	}
	pns, pfrac, ok := l.decodeShaper(state, hdrSize)
	if !ok {
		return 0, 0, false
	}
	var d Decision
	l.shaperTail(&d, pns, pfrac, true, now)
	return d.Remaining, now, true
}

// decodeShaper reads (pns, pfrac) at state[off:] (off == 0: a fresh key).
func (l *LeakyBucket) decodeShaper(state []byte, off int) (pns, pfrac int64, ok bool) {
	if off == 0 {
		return 0, 0, false
	}
	pns, pfrac = get64(state[off:]), get32(state[off+8:])
	if !validStamp(pns) || pfrac >= l.b.lg {
		return 0, 0, false
	}
	return pns, pfrac, true
}

func (l *LeakyBucket) encodeShaper(state []byte, pns, pfrac int64) []byte {
	out := outBuf(state, shaperSize, shaperSize)
	l.b.p.put(out, verLeakyShaper2)
	put64(out[hdrSize:], pns)
	put32(out[hdrSize+8:], pfrac)
	return out
}

func (l *LeakyBucket) shape(state []byte, now, n int64) (Decision, []byte) {
	b := &l.b
	off, conv := l.locate(state)
	if conv {
		return convert(l, state, now, n, l.b.capacity)
	}
	pns, pfrac, ok := l.decodeShaper(state, off)
	d := Decision{Limit: b.limit}
	if n <= 0 || n > b.capacity {
		l.shaperTail(&d, pns, pfrac, ok, now)
		return d, state
	}
	// Q = P + n*wg/lg, the earliest release the spacing rule allows.
	relNs, relFrac := now, int64(0)
	if ok {
		s := pfrac + n*b.wg
		qns, qfrac := pns+s/b.lg, s%b.lg
		if qns > now || (qns == now && qfrac > 0) {
			dd := qns - now
			if dd > l.qD || (dd == l.qD && qfrac > l.rD) {
				retry := qns - l.qD
				if qfrac > l.rD {
					retry++
				}
				d.RetryAfter = dur(retry - now)
				l.shaperTail(&d, pns, pfrac, true, now)
				return d, state
			}
			relNs, relFrac = qns, qfrac
			d.Delay = dur(dd)
			if qfrac > 0 {
				d.Delay++
			}
		}
	}
	d.Allowed = true
	l.shaperTail(&d, relNs, relFrac, true, now)
	return d, l.encodeShaper(state, relNs, relFrac)
}

// shaperTail fills Remaining and ResetAfter from the release P = pns + pfrac/lg that is stored
// after the decision.
func (l *LeakyBucket) shaperTail(d *Decision, pns, pfrac int64, ok bool, now int64) {
	b := &l.b
	if !ok {
		d.Remaining = b.capacity
		return
	}
	switch z := now + l.qD - pns; {
	case z < 0:
		d.Remaining = 0
	case z > l.capNs:
		d.Remaining = b.capacity
	default:
		d.Remaining = min(b.capacity, max(0, z*b.lg+l.rD-pfrac)/b.wg)
	}
	s := pfrac + l.e
	reset := pns + s/b.lg
	if s%b.lg > 0 {
		reset++
	}
	d.ResetAfter = dur(max(0, reset-now))
}

// StateSize implements Limiter: 41 bytes for the meter, 37 for the shaper.
func (l *LeakyBucket) StateSize() int {
	if l.shaper {
		return shaperSize
	}
	return tbSize
}

// Idle implements Limiter. The meter is idle when the bucket is empty; the shaper when every
// request of up to C events would be released at once and leave the same state as on a fresh
// key, that is when P + C*Window/Limit <= now. A state recorded under other parameters is idle
// when the old configuration reports C remaining (see idleConverted), although for the shaper
// the converted state (P = tc) and a fresh key differ by the fresh key's first request.
func (l *LeakyBucket) Idle(state []byte, now int64) bool {
	if !l.shaper {
		return l.b.Idle(state, now)
	}
	now = clampNow(now)
	off, conv := l.locate(state)
	if conv {
		return idleConverted(state, now, l.b.capacity)
	}
	pns, pfrac, ok := l.decodeShaper(state, off)
	if !ok {
		return true
	}
	s := pfrac + l.b.capU
	ins := pns + s/l.b.lg
	if s%l.b.lg > 0 {
		ins++
	}
	return ins <= now
}
