package algorithms

import (
	"encoding/binary"
	"time"
)

// What every algorithm shares for configuration changes (see the package documentation): the
// parameter block of paramSize bytes each current encoding records after its version byte
// (hdrSize bytes in all, the algorithm's fields follow), and the conversion of a state
// recorded under other parameters.
const (
	paramSize = 24
	hdrSize   = 1 + paramSize
)

// params is a limiter's parameter block, kept as the three little-endian 64-bit words it is
// stored as, so that the hot path checks a state's recorded parameters with three loads and
// three comparisons before decoding anything:
//
//	[1:5]   limit      uint32 LE
//	[5:9]   capacity   uint32 LE: Burst, or Limit when Burst is 0 (Limit for the windows and
//	                   adaptive, whose capacity is their limit)
//	[9:17]  window     int64 LE, ns
//	[17:25] max_delay  int64 LE, ns; 0 except for the leaky-bucket shaper
//
// The algorithm (with the sliding-window variant, and whether a leaky bucket shapes) is the
// version byte in front of the block. Adaptive records the limit in force in both limit and
// capacity (its controller changes it, so only its window is compared).
type params struct{ limCap, window, maxDelay uint64 }

func makeParams(limit, capacity int64, window, maxDelay time.Duration) params {
	return params{limCap: uint64(limit) | uint64(capacity)<<32, window: uint64(window), maxDelay: uint64(maxDelay)}
}

// matches reports whether state has the version byte ver and records exactly these
// parameters. The caller checks the length of the fields that follow the header.
func (p *params) matches(state []byte, ver byte) bool {
	return len(state) >= hdrSize && state[0] == ver &&
		binary.LittleEndian.Uint64(state[1:]) == p.limCap &&
		binary.LittleEndian.Uint64(state[9:]) == p.window &&
		binary.LittleEndian.Uint64(state[17:]) == p.maxDelay
}

// put writes the header (ver and the block) into out[:hdrSize].
func (p *params) put(out []byte, ver byte) {
	out = out[:hdrSize] // one bounds check for every store (see filter/doc.go)
	out[0] = ver
	binary.LittleEndian.PutUint64(out[1:], p.limCap)
	binary.LittleEndian.PutUint64(out[9:], p.window)
	binary.LittleEndian.PutUint64(out[17:], p.maxDelay)
}

// locate classifies state for a limiter whose current encoding is ver (size bytes, or
// sizeCarry with a window's carry) and v1 encoding verV1 (sizeV1 bytes): off is where the
// fields start (hdrSize for the current encoding with these parameters, 1 for v1, 0 for a
// fresh key), and convert is true for a current encoding recorded under other parameters or
// by another algorithm.
func (p *params) locate(state []byte, ver byte, size, sizeCarry int, verV1 byte, sizeV1 int) (off int, convert bool) {
	switch {
	case (len(state) == size || len(state) == sizeCarry) && p.matches(state, ver):
		return hdrSize, false
	case len(state) == sizeV1 && state[0] == verV1:
		return 1, false
	default:
		return 0, isCurrent(state)
	}
}

// isCurrent reports whether state starts like a current encoding of any algorithm: a version
// byte of the current layouts and room for the parameter block. Whether the rest decodes is
// decided by peekOld.
func isCurrent(state []byte) bool {
	if len(state) < hdrSize {
		return false
	}
	switch state[0] {
	case verTokenBucket2, verLeakyMeter2, verLeakyShaper2, verSlidingCount2, verSlidingLog32v2,
		verSlidingLog64v2, verFixedWindow2, verGCRA2, verAdaptiveAdmit2:
		return true
	}
	return false
}

// RecordedConfig returns the configuration a state was written under, as its parameter block
// records it: Algorithm, Variant (sliding_window only), Limit, Window, Burst (the capacity,
// never 0) and MaxDelay (the shaper only); for an adaptive admission state Limit is the limit
// in force when written. ok is false for a nil, short, corrupt or v1 state. peekOld reads the
// old configuration with it, and the differential test against the Redis Lua scripts the
// configuration of a state Redis wrote.
func RecordedConfig(state []byte) (Config, bool) {
	if !isCurrent(state) {
		return Config{}, false
	}
	limit, capacity := get32(state[1:]), get32(state[5:])
	c := Config{Limit: limit, Window: dur(get64(state[9:])), Burst: capacity}
	md := get64(state[17:])
	windowLike := false
	switch state[0] {
	case verTokenBucket2:
		c.Algorithm = AlgTokenBucket
	case verGCRA2:
		c.Algorithm = AlgGCRA
	case verLeakyMeter2:
		c.Algorithm = AlgLeakyBucket
	case verLeakyShaper2:
		c.Algorithm = AlgLeakyBucket
		if md <= 0 {
			return Config{}, false
		}
		c.MaxDelay = dur(md)
	case verSlidingCount2:
		c.Algorithm, c.Variant, windowLike = AlgSlidingWindow, VariantCounter, true
	case verSlidingLog32v2, verSlidingLog64v2:
		c.Algorithm, c.Variant, windowLike = AlgSlidingWindow, VariantLog, true
	case verFixedWindow2:
		c.Algorithm, windowLike = AlgFixedWindow, true
	case verAdaptiveAdmit2:
		c.Algorithm, windowLike = AlgAdaptive, true
	}
	if state[0] != verLeakyShaper2 && md != 0 {
		return Config{}, false
	}
	if windowLike {
		// The windows' capacity is their limit; the block records it so that it has one
		// layout, and anything else is corrupt.
		if capacity != limit {
			return Config{}, false
		}
		c.Burst = 0
	}
	if capacity <= 0 || limit <= 0 {
		return Config{}, false
	}
	return c, true
}

// peekOld evaluates a current-encoding state under the configuration recorded in it: the
// Remaining that configuration's limiter reports at now (before any request), the instant it
// evaluated the state at (now, or the later instant the state last saw when now is stale),
// and whether that limiter finds the state idle (equivalent to one of its fresh keys). ok is
// false when the recorded configuration is invalid or the state does not decode under it:
// the state is then a fresh key, as any undecodable state. now is already clamped. The old
// limiter is rebuilt by value from the block, so this allocates nothing.
func peekOld(state []byte, now int64) (r, at int64, idle, ok bool) {
	c, ok := RecordedConfig(state)
	if !ok {
		return 0, 0, false, false
	}
	switch state[0] {
	case verTokenBucket2:
		var t TokenBucket
		if t.init(c) == nil {
			r, at, ok = t.peek(state, now)
			return r, at, ok && t.Idle(state, now), ok
		}
	case verLeakyMeter2, verLeakyShaper2:
		var l LeakyBucket
		if l.init(c) == nil {
			r, at, ok = l.peek(state, now)
			return r, at, ok && l.Idle(state, now), ok
		}
	case verSlidingCount2:
		var s SlidingWindowCounter
		if s.init(c) == nil {
			r, at, ok = s.peek(state, now)
			return r, at, ok && s.Idle(state, now), ok
		}
	case verSlidingLog32v2, verSlidingLog64v2:
		var l SlidingWindowLog
		if l.init(c) == nil && l.ver == state[0] {
			r, at, ok = l.peek(state, now)
			return r, at, ok && l.Idle(state, now), ok
		}
	case verFixedWindow2:
		var f FixedWindow
		if f.init(c) == nil {
			r, at, ok = f.peek(state, now)
			return r, at, ok && f.Idle(state, now), ok
		}
	case verGCRA2:
		var g GCRA
		if g.init(c) == nil {
			r, at, ok = g.peek(state, now)
			return r, at, ok && g.Idle(state, now), ok
		}
	case verAdaptiveAdmit2:
		if validateCommon(c, LimitCeiling) == nil {
			return peekAdaptive(state, now, c)
		}
	}
	return 0, 0, false, false
}

// consumption converts a state recorded under other parameters for a limiter of capacity
// capNew: R = min(R_old, capNew) allowance is left, so the new state is that of a key that
// consumed c = capNew - R at tc = max(now, the instant the old limiter evaluated the state
// at). ok is false when the state does not decode: the caller treats it as a fresh key.
//
// A state the old configuration finds idle consumed nothing that is still counted, so it
// converts to a key with nothing consumed (R = capNew), not to R_old: otherwise, after a raised
// capacity, a request costing more than the old capacity would be denied for as long as every
// request of that key does, because a denial writes nothing and R_old never grows past the old
// capacity. The Lua scripts follow the same rule.
func consumption(state []byte, now, capNew int64) (c, tc int64, ok bool) {
	r, at, idle, ok := peekOld(state, now)
	if !ok {
		return 0, 0, false
	}
	if idle {
		r = capNew
	}
	return capNew - min(max(r, 0), capNew), max(now, at), true
}

// idleConverted is Idle for a state recorded under other parameters, for a limiter of
// capacity capNew: true when the old configuration reports at least capNew remaining or finds
// the state idle (it counts nothing), evaluated no later than now (a stale conversion instant
// would postpone the new timeline). Without the second case a raised capacity would keep the
// slot of every key that never returns for good; a key that lost such a slot starts fresh, as
// after its Redis key expired.
func idleConverted(state []byte, now, capNew int64) bool {
	r, at, idle, ok := peekOld(state, now)
	return !ok || ((idle || r >= capNew) && at <= now)
}

// convert is AllowN of l on a state recorded under other parameters, for a limiter of capacity
// capNew: it decides n on the converted state (see consumption), or on a fresh key when the
// state does not decode.
func convert(l interface {
	Limiter
	converted(c, tc int64) []byte
}, state []byte, now, n, capNew int64) (Decision, []byte) {
	var conv []byte
	if c, tc, ok := consumption(state, now, capNew); ok {
		conv = l.converted(c, tc)
	}
	d, out := l.AllowN(conv, now, n)
	return finishConverted(state, d, out, l.StateSize())
}

// finishConverted returns what AllowN returns after deciding on a converted state: when
// admitted, the new state (in state's array when its capacity allows); otherwise the input
// unchanged, so that a denial writes nothing and the next request converts again.
func finishConverted(state []byte, d Decision, out []byte, maxSize int) (Decision, []byte) {
	if !d.Allowed {
		return d, state
	}
	res := outBuf(state, len(out), maxSize)
	copy(res, out)
	return d, res
}
