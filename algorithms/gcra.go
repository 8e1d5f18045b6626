package algorithms

// GCRA is gcra, the Generic Cell Rate Algorithm: one theoretical arrival time (TAT) per key
// encodes the whole state, with the seed's integer-nanosecond formulas extended to n cells.
//
// # Formulas, and the one place this differs from the seed
//
//	emissionInterval T = Window / Limit            (integer ns, truncated)
//	burstOffset        = T × (Burst − 1)
//	TAT'               = max(TAT, now) + n×T
//	allowAt            = TAT' − T − burstOffset     (= TAT' − T×Burst)
//	allowed            = allowAt <= now
//	retryAfter         = allowAt − now              (when denied)
//	remaining          = floor((now − allowAt) / T) (when allowed)
//
// The seed tests "TAT' − burstOffset <= now" on the incremented TAT. Taken literally that
// admits only Burst − 1 requests from a fresh key, and none at all with Burst = 1, which
// contradicts Burst being the capacity. As in the ATM virtual-scheduling algorithm (and
// throttled and redis-cell, whose tolerance is T×(maxBurst+1)), the test applies to the
// arrival time of the last cell of the request, TAT' − T. Everything else is the seed's
// formula unchanged, and a fresh key admits exactly Burst cells at once.
//
// T is truncated to whole nanoseconds, as in the seed (time.Duration arithmetic). When Limit
// does not divide Window the sustained rate is 1/T, above Limit/Window by a factor of less
// than 1 + 1/T (under 0.0001% once T >= 1ms); New requires T >= 1ns.
//
// # Arithmetic (the spec for the Lua port)
//
//	tau = T*B                          -- B = Burst, Limit when 0
//	state: TAT (absolute ns); fresh: TAT = now
//	base = max(TAT, now)
//	if n <= 0 or n > B: unsatisfiable (state unchanged)
//	TAT' = base + n*T;  allowAt = TAT' - tau
//	allowed:  store TAT'; Remaining = floor((now - allowAt) / T); ResetAfter = TAT' - now
//	denied:   RetryAfter = allowAt - now; Remaining = floor(max(0, now + tau - base) / T);
//	          ResetAfter = base - now
//
// The largest intermediate that is not an absolute timestamp is tau + T = T*(B+1), which New
// keeps <= 2^53. A stale now (time going backwards) needs no special case: TAT is compared
// with now itself, so an earlier now is only stricter.
//
// # State layout (9 bytes)
//
//	[0]   0x61 version
//	[1:9] TAT, int64 LE, Unix ns
type GCRA struct {
	limit, burst, t, tau int64
}

const gcraSize = 9

func newGCRA(c Config) (*GCRA, error) {
	if err := validateCommon(c, LimitCeiling, fieldSet{burst: true}); err != nil {
		return nil, err
	}
	t := int64(c.Window) / c.Limit
	if t < 1 {
		return nil, cfgErr("limit", "gcra needs window/limit >= 1ns (its emission interval), got %d per %v", c.Limit, c.Window)
	}
	b := capacityOf(c)
	if err := checkExact(capacityField(c), "emission interval * (burst + 1)",
		"lower the burst or the window", [2]int64{t, b + 1}); err != nil {
		return nil, err
	}
	return &GCRA{limit: c.Limit, burst: b, t: t, tau: t * b}, nil
}

// EmissionInterval returns T = Window/Limit in nanoseconds, the spacing of a sustained stream.
func (g *GCRA) EmissionInterval() int64 { return g.t }

func (g *GCRA) decode(state []byte) (tat int64, ok bool) {
	if len(state) != gcraSize || state[0] != verGCRA {
		return 0, false
	}
	tat = get64(state[1:])
	return tat, validStamp(tat)
}

// AllowN implements Limiter; see the type documentation for the arithmetic.
func (g *GCRA) AllowN(state []byte, now int64, n int64) (Decision, []byte) {
	now = clampNow(now)
	tat, ok := g.decode(state)
	base := now
	if ok && tat > now {
		base = tat
	}
	d := Decision{Limit: g.limit}
	if n <= 0 || n > g.burst {
		d.Remaining = max(0, now+g.tau-base) / g.t
		d.ResetAfter = dur(base - now)
		return d, state
	}
	newTAT := base + n*g.t
	allowAt := newTAT - g.tau
	if allowAt > now {
		d.RetryAfter = dur(allowAt - now)
		d.Remaining = max(0, now+g.tau-base) / g.t
		d.ResetAfter = dur(base - now)
		newTAT = base
	} else {
		d.Allowed = true
		d.Remaining = (now - allowAt) / g.t
		d.ResetAfter = dur(newTAT - now)
	}
	out := outBuf(state, gcraSize, gcraSize)
	out[0] = verGCRA
	put64(out[1:], newTAT)
	return d, out
}

// StateSize implements Limiter: a GCRA state is always 9 bytes.
func (g *GCRA) StateSize() int { return gcraSize }

// Idle implements Limiter: TAT <= now.
func (g *GCRA) Idle(state []byte, now int64) bool {
	tat, ok := g.decode(state)
	return !ok || tat <= clampNow(now)
}
