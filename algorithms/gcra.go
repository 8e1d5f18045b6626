package algorithms

import "strconv"

// GCRA is gcra, the Generic Cell Rate Algorithm of ITU-T I.371 (its virtual-scheduling form):
// one theoretical arrival time (TAT) per key encodes the whole state, in integer nanoseconds,
// extended to requests of n cells.
//
// # Arithmetic (the spec for the Lua port)
//
//	T = Window / Limit (integer ns, truncated);  tau = T*B  -- B = Burst, Limit when 0
//	state: TAT (absolute ns); fresh: TAT = now
//	base = max(TAT, now)
//	if n <= 0 or n > B: unsatisfiable (state unchanged)
//	TAT' = base + n*T;  allowAt = TAT' - tau  (= TAT' - T - T*(B-1)); allowed = allowAt <= now
//	allowed:  store TAT'; Remaining = floor((now - allowAt) / T); ResetAfter = TAT' - now
//	denied:   RetryAfter = allowAt - now; Remaining = floor(max(0, now + tau - base) / T);
//	          ResetAfter = base - now
//
// A common rendering of GCRA tests "TAT' − T×(Burst−1) <= now" on the incremented TAT. Taken
// literally that admits only Burst − 1 requests from a fresh key, and none at all with
// Burst = 1, which contradicts Burst being the capacity. As in I.371's virtual-scheduling
// algorithm (and throttled and redis-cell, whose tolerance is T×(maxBurst+1)), the test applies
// to the arrival time of the last cell of the request, TAT' − T, so a fresh key admits exactly
// Burst cells at once.
//
// When Limit does not divide Window the sustained rate is 1/T, above Limit/Window by a factor
// of less than 1 + 1/T (under 0.0001% once T >= 1ms); New requires T >= 1ns. The largest
// intermediate that is not an absolute timestamp is tau + T = T*(B+1), which New keeps
// <= 2^53. A stale now needs no special case: TAT is compared with now itself.
//
// # State layout (33 bytes; v1: 9 bytes, 0x61, TAT)
//
//	[0]     0x63 version
//	[1:25]  parameter block (limit, burst B, window, max_delay 0; see RecordedConfig)
//	[25:33] TAT, int64 LE, Unix ns
//
// # Configuration changes
//
// With R = min(R_old, B) and C = B - R (see the package documentation), the key has consumed
// C cells at tc: TAT = tc + C*T, so exactly R cells pass at tc.
type GCRA struct {
	limit, burst, t, tau int64
	p                    params
}

const (
	gcraSize   = hdrSize + 8
	gcraSizeV1 = 9
)

// init validates c and sets g up (newLimiter, and peekOld by value).
func (g *GCRA) init(c Config) error {
	if err := validateCommon(c, LimitCeiling); err != nil {
		return err
	}
	t := int64(c.Window) / c.Limit
	if t < 1 {
		return cfgErr("limit", "gcra needs window/limit >= 1ns (its emission interval), got "+strconv.FormatInt(c.Limit, 10)+" per "+c.Window.String())
	}
	b := c.Capacity()
	if err := checkExact(c.CapacityField(), "emission interval * (burst + 1)",
		"lower the burst or the window", [2]int64{t, b + 1}); err != nil {
		return err
	}
	*g = GCRA{limit: c.Limit, burst: b, t: t, tau: t * b, p: makeParams(c.Limit, b, c.Window, 0)}
	return nil
}

// decode reads the TAT at state[off:] (off == 0: a fresh key).
func (g *GCRA) decode(state []byte, off int) (tat int64, ok bool) {
	if off == 0 {
		return 0, false
	}
	tat = get64(state[off:])
	return tat, validStamp(tat)
}

func (g *GCRA) locate(state []byte) (off int, convert bool) {
	return g.p.locate(state, verGCRA2, gcraSize, gcraSize, verGCRA, gcraSizeV1)
}

// AllowN implements Limiter; see the type documentation for the arithmetic.
func (g *GCRA) AllowN(state []byte, now int64, n int64) (Decision, []byte) {
	now = clampNow(now)
	off, conv := g.locate(state)
	if conv {
		return convert(g, state, now, n, g.burst)
	}
	tat, ok := g.decode(state, off)
	base := now
	if ok && tat > now {
		base = tat
	}
	d := Decision{Limit: g.limit, Remaining: max(0, now+g.tau-base) / g.t, ResetAfter: dur(base - now)}
	if n <= 0 || n > g.burst {
		return d, state
	}
	newTAT := base + n*g.t
	if allowAt := newTAT - g.tau; allowAt > now {
		d.RetryAfter = dur(allowAt - now)
		newTAT = base
	} else {
		d.Allowed = true
		d.Remaining = (now - allowAt) / g.t
		d.ResetAfter = dur(newTAT - now)
	}
	return d, g.encode(state, newTAT)
}

func (g *GCRA) encode(state []byte, tat int64) []byte {
	out := outBuf(state, gcraSize, gcraSize)
	g.p.put(out, verGCRA2)
	put64(out[hdrSize:], tat)
	return out
}

// converted is the state of a key that consumed c at tc; see the type documentation.
func (g *GCRA) converted(c, tc int64) []byte { return g.encode(nil, tc+c*g.t) }

// peek reports the cells that pass at now, for a state in g's current encoding with g's
// parameters. GCRA compares its schedule with now itself, so it evaluates at now.
func (g *GCRA) peek(state []byte, now int64) (r, at int64, ok bool) {
	if len(state) != gcraSize || !g.p.matches(state, verGCRA2) {
		return 0, 0, false
	}
	tat, ok := g.decode(state, hdrSize)
	if !ok {
		return 0, 0, false
	}
	return max(0, now+g.tau-max(tat, now)) / g.t, now, true
}

// StateSize implements Limiter: a GCRA state is always 33 bytes.
func (g *GCRA) StateSize() int { return gcraSize }

// Idle implements Limiter: TAT <= now.
func (g *GCRA) Idle(state []byte, now int64) bool {
	now = clampNow(now)
	off, conv := g.locate(state)
	if conv {
		return idleConverted(state, now, g.burst)
	}
	tat, ok := g.decode(state, off)
	return !ok || tat <= now
}
