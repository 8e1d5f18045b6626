package algorithms

// TokenBucket is token_bucket: a bucket of capacity B = Burst (Limit when 0) that starts full
// and refills continuously at Limit/Window tokens per second up to B; AllowN(n) takes n tokens
// or none.
//
// It agrees decision for decision with golang.org/x/time/rate (rate.Limit(Limit /
// Window.Seconds()), burst B, AllowN(time.Unix(0, now), n)) on non-decreasing times, except
// where x/time/rate's float64 arithmetic is looser than this exact one: it truncates a token
// shortfall's wait towards zero, so it admits a request whose tokens would be complete less
// than 1ns later (3 per second, burst 1, requests at 0 and 333333333ns), which this type
// denies with RetryAfter = 1ns, and float64 rounding can move a request across that boundary.
// When Window/Limit is a whole number of microseconds and requests arrive on whole
// microseconds the decisions are identical (a test checks this on random sequences). When time
// goes backwards x/time/rate counts the same refill twice; this type does not.
//
// # Arithmetic (the spec for the Lua port)
//
// Let g = gcd(L, W) with W in ns, lg = L/g, wg = W/g. Amounts are in units of 1/wg token, so
// one nanosecond refills exactly lg units: capU = B*wg, need = n*wg.
//
//	state: tokens (units, 0..capU), last (absolute ns)
//	fresh: tokens = capU, last = now
//	eff     = max(now, last)                 -- a stale call is evaluated at last
//	elapsed = eff - last
//	deficit = capU - tokens
//	if deficit > 0:
//	    fill = floor((deficit + lg - 1) / lg)     -- ns until full
//	    tokens = capU if elapsed >= fill else tokens + elapsed*lg
//	if n <= 0 or n > B: unsatisfiable (state unchanged)
//	allowed = tokens >= need;  if allowed: tokens = tokens - need
//	RetryAfter = (eff-now) + floor((need - tokens + lg - 1) / lg)     when denied
//	Remaining  = floor(tokens / wg)
//	ResetAfter = (eff-now) + floor((capU - tokens + lg - 1) / lg)
//	store (tokens, eff)
//
// elapsed < fill keeps elapsed*lg below deficit, so the largest intermediate is
// capU + wg + 2*lg, which New keeps <= 2^53. elapsed is a difference of absolute timestamps
// that may be huge after a long idle period; it is only compared with fill.
//
// # State layout (41 bytes; v1: 17 bytes, 0x11, tokens, last)
//
//	[0]     0x13 version
//	[1:25]  parameter block (limit, capacity B, window, max_delay 0; see RecordedConfig)
//	[25:33] tokens, int64 LE, units of 1/wg token
//	[33:41] last,   int64 LE, Unix ns
//
// # Configuration changes
//
// With R = min(R_old, B) (see the package documentation), the key holds exactly R tokens at
// tc:
//
//	tokens = R*wg, last = tc
type TokenBucket struct{ bucket }

// tbSize is the encoded size of a TokenBucket or LeakyBucket meter state; tbSizeV1 that of the
// v1 layout.
const (
	tbSize   = hdrSize + 16
	tbSizeV1 = 17
)

// bucket is the exact continuous bucket shared by TokenBucket and the LeakyBucket meter. The
// two are the same machine seen from opposite sides: tokens = capU - occupancy; a meter's state
// holds the occupancy (level).
type bucket struct {
	limit, capacity int64
	lg, wg, capU    int64
	p               params
	ver, verV1      byte // the current and the v1 encoding's version bytes
	meter           bool
}

func newBucket(c Config, ver, verV1 byte) (bucket, error) {
	capacity := c.Capacity()
	lg, wg := rateScale(c.Limit, c.Window)
	if err := checkExact(c.CapacityField(), "capacity*window/gcd(limit, window in ns) + window/gcd + 2*limit/gcd",
		"lower the burst or the window, or pick a limit that shares more factors with the window in ns (for example 2500 instead of 2503 per hour)",
		[2]int64{capacity, wg}, [2]int64{1, wg}, [2]int64{2, lg}); err != nil {
		return bucket{}, err
	}
	return bucket{limit: c.Limit, capacity: capacity, lg: lg, wg: wg, capU: capacity * wg,
		p: makeParams(c.Limit, capacity, c.Window, c.MaxDelay), ver: ver, verV1: verV1, meter: ver == verLeakyMeter2}, nil
}

// init validates c and sets t up (newLimiter, and peekOld by value).
func (t *TokenBucket) init(c Config) error {
	if err := validateCommon(c, LimitCeiling); err != nil {
		return err
	}
	b, err := newBucket(c, verTokenBucket2, verTokenBucket)
	t.bucket = b
	return err
}

// refill brings decoded tokens (ok false: a fresh key) at last to eff = max(now, last).
func (b *bucket) refill(tokens, last int64, ok bool, now int64) (int64, int64) {
	if !ok {
		return b.capU, now
	}
	eff := max(now, last)
	if deficit := b.capU - tokens; deficit > 0 {
		if fill := ceilDiv(deficit, b.lg); eff-last >= fill {
			tokens = b.capU
		} else {
			tokens += (eff - last) * b.lg
		}
	}
	return tokens, eff
}

// decide applies n to tokens at eff and fills the decision; it reports whether the state must
// be stored (false only for unsatisfiable requests).
func (b *bucket) decide(tokens, eff, now, n int64) (Decision, int64, bool) {
	skew := eff - now
	d := Decision{Limit: b.limit}
	store := true
	if n <= 0 || n > b.capacity {
		store = false
	} else if need := n * b.wg; tokens >= need {
		tokens -= need
		d.Allowed = true
	} else {
		d.RetryAfter = dur(skew + ceilDiv(need-tokens, b.lg))
	}
	d.Remaining = tokens / b.wg
	d.ResetAfter = dur(skew + ceilDiv(b.capU-tokens, b.lg))
	return d, tokens, store
}

// locate classifies state; see params.locate.
func (b *bucket) locate(state []byte) (off int, convert bool) {
	return b.p.locate(state, b.ver, tbSize, tbSize, b.verV1, tbSizeV1)
}

// decode reads the (value, last) fields at state[off:] (off == 0: a fresh key); value, the
// tokens or the meter's level, is clamped to [0, capU].
func (b *bucket) decode(state []byte, off int) (value, last int64, ok bool) {
	if off == 0 {
		return 0, 0, false
	}
	value, last = get64(state[off:]), get64(state[off+8:])
	if last < 0 || last > MaxTime {
		return 0, 0, false
	}
	return min(max(value, 0), b.capU), last, true
}

// load decodes the fields at state[off:] and returns the tokens refilled to now, the instant
// they are evaluated at, and whether the fields decoded.
func (b *bucket) load(state []byte, off int, now int64) (tokens, eff int64, ok bool) {
	v, last, ok := b.decode(state, off)
	if b.meter {
		v = b.capU - v
	}
	tokens, eff = b.refill(v, last, ok, now)
	return tokens, eff, ok
}

// encode writes the state of tokens at eff, in state's array when its capacity allows.
func (b *bucket) encode(state []byte, tokens, eff int64) []byte {
	if b.meter {
		tokens = b.capU - tokens
	}
	out := outBuf(state, tbSize, tbSize)
	b.p.put(out, b.ver)
	put64(out[hdrSize:], tokens)
	put64(out[hdrSize+8:], eff)
	return out
}

// AllowN implements Limiter for the token bucket and the meter; see the type documentation for
// the arithmetic. A fresh key (an empty state) starts full at now; a stored one is read by
// stored.
func (b *bucket) AllowN(state []byte, now int64, n int64) (Decision, []byte) {
	now = clampNow(now)
	tokens, eff := b.capU, now
	if len(state) != 0 {
		var conv bool
		if tokens, eff, conv = b.stored(state, now); conv {
			return convert(b, state, now, n, b.capacity)
		}
	}
	d, tokens, store := b.decide(tokens, eff, now, n)
	if !store {
		return d, state
	}
	return d, b.encode(state, tokens, eff)
}

// stored locates a stored state (not empty) and returns its tokens refilled to now and the
// instant they are evaluated at; or conv when the state was recorded under other parameters
// or by another algorithm. It is out of AllowN's line (see filter/doc.go): a fresh key needs
// none of it.
func (b *bucket) stored(state []byte, now int64) (tokens, eff int64, conv bool) {
	off, conv := b.locate(state)
	if conv {
		return 0, 0, true
	}
	tokens, eff, _ = b.load(state, off, now)
	return tokens, eff, false
}

// converted is the state of a key that consumed c at tc; see the type documentation.
func (b *bucket) converted(c, tc int64) []byte { return b.encode(nil, b.capU-c*b.wg, tc) }

// peek reports the whole tokens left at now and the instant the bucket was evaluated at, for
// a state in the current encoding with b's parameters (now already clamped).
func (b *bucket) peek(state []byte, now int64) (r, at int64, ok bool) {
	if off, _ := b.locate(state); off != hdrSize {
		return 0, 0, false
	}
	tokens, eff, ok := b.load(state, hdrSize, now)
	return tokens / b.wg, eff, ok
}

// StateSize implements Limiter: a bucket state is always 41 bytes.
func (b *bucket) StateSize() int { return tbSize }

// Idle implements Limiter: the bucket is full (the meter empty) at now.
func (b *bucket) Idle(state []byte, now int64) bool {
	now = clampNow(now)
	off, conv := b.locate(state)
	if conv {
		return idleConverted(state, now, b.capacity)
	}
	tokens, _, _ := b.load(state, off, now)
	return tokens == b.capU
}
