package algorithms

// SlidingWindowCounter is sliding_window with the counter variant (the default): two
// clock-aligned window counters, and an estimate of the events in the sliding window
//
//	estimate = previous × (1 − elapsed/Window) + current
//
// where elapsed is the time since the current window started. n events are admitted when
// estimate + n <= Limit.
//
// # Approximation bound
//
// The estimate assumes the previous window's events were spread evenly over it. When they
// were not, the true count in the sliding window (now−Window, now] differs from the estimate,
// and in the worst case (all of the previous window's events at its very end) up to
// Limit + previous×elapsed/Window < 2×Limit events can be admitted in one sliding window; the
// largest reachable count is 2×Limit−1. Two guarantees always hold: at most Limit events in
// each aligned window, and fewer than 2×Limit in any sliding window. On evenly spread traffic
// the estimate is exact up to the quantisation below. (The seed's "limit × 1/windowBuckets"
// error applies to bucketed variants; this one has a single previous bucket.)
//
// The weight (1 − elapsed/Window) is quantised to 1/S with S = 10^6 slices per window,
// rounding elapsed down, so the weight is never below the exact one: the quantisation only
// ever counts more (by less than previous/S < 1 event per 10^6 of Limit) and never admits
// more than the exact formula. It keeps every product below 2^53 for any window: a slice is
// Window/10^6 ns, an integer because Window is a whole number of milliseconds.
//
// # Arithmetic (the spec for the Lua port)
//
//	S = 1000000, slice = W / S (ns), L = Limit
//	state: ws (absolute start of the window "cur" counts), prev, cur
//	fresh: ws = start(now), prev = cur = 0, where start(t) = t - (t mod W)
//	w = start(now); eff = now
//	if w < ws:  w = ws; eff = ws               -- a stale call counts against the newer window
//	elif w == ws + W: prev, cur = cur, 0
//	elif w > ws + W:  prev, cur = 0, 0
//	e   = floor((eff - w) / slice)             -- 0 <= e < S
//	est = prev*(S - e) + cur*S                  -- the estimate, in units of 1/S event
//	if n <= 0 or n > L: unsatisfiable (state unchanged)
//	allowed = est + n*S <= L*S;  if allowed: cur = cur + n; est = est + n*S
//	Remaining  = floor(max(0, L*S - est) / S)
//	ResetAfter = w + 2W - now if cur > 0, else w + W - now if prev > 0, else 0
//	store (w, prev, cur)
//
// RetryAfter, when denied, is the earliest instant at which the same request passes:
//
//	if cur + n <= L and prev > 0:
//	    m = S - floor((L - cur - n)*S / prev)       -- first slice where prev's weight is low enough
//	    if m < S: retry = w + m*slice
//	if not found, at the next window (prev' = cur, cur' = 0):
//	    retry = w + W                                if cur == 0
//	    m = S - floor((L - n)*S / cur)
//	    retry = w + W                                if m <= 0
//	    retry = w + W + m*slice                      if 0 < m < S
//	    retry = w + 2W                               otherwise (n == L: wait until prev' is gone)
//	RetryAfter = retry - now
//
// The largest intermediate is 3*L*S <= 3*10^15 < 2^53.
//
// # State layout (17 bytes)
//
//	[0]     0x31 version
//	[1:9]   ws,   int64 LE, Unix ns (a multiple of W)
//	[9:13]  prev, uint32 LE
//	[13:17] cur,  uint32 LE
type SlidingWindowCounter struct {
	cc counterCore
}

// counterSlices is S, the resolution of the previous window's weight.
const counterSlices = 1_000_000

const counterSize = 17

type counterCore struct {
	w, slice int64
	lim      int64 // the limit (the ceiling for adaptive), used to clamp decoded counts
}

func (cc *counterCore) limit() int64 { return cc.lim }

func newSlidingWindowCounter(c Config) (*SlidingWindowCounter, error) {
	if err := validateCommon(c, LimitCeiling, fieldSet{}); err != nil {
		return nil, err
	}
	return &SlidingWindowCounter{cc: newCounterCore(c)}, nil
}

func newCounterCore(c Config) counterCore {
	return counterCore{w: int64(c.Window), slice: int64(c.Window) / counterSlices, lim: c.Limit}
}

// roll moves a decoded (ws, prev, cur) to the window of now; it returns the window start w,
// the instant eff used for the weight, and the rolled counters.
func (cc *counterCore) roll(ws, prev, cur int64, ok bool, now int64) (w, eff, p, c int64) {
	w, eff = now-now%cc.w, now
	switch {
	case !ok:
		return w, eff, 0, 0
	case w < ws:
		return ws, ws, prev, cur
	case w == ws:
		return w, eff, prev, cur
	case w == ws+cc.w:
		return w, eff, cur, 0
	default:
		return w, eff, 0, 0
	}
}

// decide applies n under limit to the rolled counters.
func (cc *counterCore) decide(w, eff, prev, cur, now, n, limit int64) (d Decision, newCur int64, store bool) {
	const S = counterSlices
	e := (eff - w) / cc.slice
	est := prev*(S-e) + cur*S
	d.Limit = limit
	store = true
	switch {
	case n <= 0 || n > limit:
		store = false
	case est+n*S <= limit*S:
		d.Allowed = true
		cur += n
		est += n * S
	default:
		d.RetryAfter = dur(cc.retryAt(w, prev, cur, n, limit) - now)
	}
	d.Remaining = max(0, limit*S-est) / S
	switch {
	case cur > 0:
		d.ResetAfter = dur(w + 2*cc.w - now)
	case prev > 0:
		d.ResetAfter = dur(w + cc.w - now)
	}
	return d, cur, store
}

// retryAt returns the earliest absolute instant at which n passes; see the type documentation.
func (cc *counterCore) retryAt(w, prev, cur, n, limit int64) int64 {
	const S = counterSlices
	if cur+n <= limit && prev > 0 {
		if m := S - (limit-cur-n)*S/prev; m < S {
			return w + m*cc.slice
		}
	}
	next := w + cc.w
	if cur == 0 {
		return next
	}
	m := S - (limit-n)*S/cur
	switch {
	case m <= 0:
		return next
	case m < S:
		return next + m*cc.slice
	default:
		return next + cc.w
	}
}

func (cc *counterCore) idle(ws, prev, cur int64, ok bool, now int64) bool {
	_, _, p, c := cc.roll(ws, prev, cur, ok, now)
	return p == 0 && c == 0
}

// decode reads (ws, prev, cur) from b; counts are clamped to limit. A window start that is
// not aligned to the window is undecodable: every start the limiter writes is aligned, and
// the roll logic relies on it.
func (cc *counterCore) decode(b []byte, limit int64) (ws, prev, cur int64, ok bool) {
	ws = get64(b)
	if ws < 0 || ws > MaxTime || ws%cc.w != 0 {
		return 0, 0, 0, false
	}
	return ws, min(get32(b[8:]), limit), min(get32(b[12:]), limit), true
}

func (s *SlidingWindowCounter) decode(state []byte, limit int64) (ws, prev, cur int64, ok bool) {
	if len(state) != counterSize || state[0] != verSlidingCount {
		return 0, 0, 0, false
	}
	return s.cc.decode(state[1:], limit)
}

// AllowN implements Limiter; see the type documentation for the arithmetic.
func (s *SlidingWindowCounter) AllowN(state []byte, now int64, n int64) (Decision, []byte) {
	now = clampNow(now)
	limit := s.cc.limit()
	ws, prev, cur, ok := s.decode(state, limit)
	w, eff, prev, cur := s.cc.roll(ws, prev, cur, ok, now)
	d, cur, store := s.cc.decide(w, eff, prev, cur, now, n, limit)
	if !store {
		return d, state
	}
	out := outBuf(state, counterSize, counterSize)
	out[0] = verSlidingCount
	put64(out[1:], w)
	put32(out[9:], prev)
	put32(out[13:], cur)
	return d, out
}

// StateSize implements Limiter: a SlidingWindowCounter state is always 17 bytes.
func (s *SlidingWindowCounter) StateSize() int { return counterSize }

// Idle implements Limiter: both counters are zero once rolled to now's window.
func (s *SlidingWindowCounter) Idle(state []byte, now int64) bool {
	now = clampNow(now)
	ws, prev, cur, ok := s.decode(state, s.cc.limit())
	return s.cc.idle(ws, prev, cur, ok, now)
}
