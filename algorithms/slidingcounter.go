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
// the estimate is exact up to the quantisation below. (The "limit × 1/windowBuckets" error
// bound quoted for bucketed variants does not apply; this one has a single previous bucket.)
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
//	state: ws (absolute start of the window "cur" counts), prev, cur, carry (the part of cur
//	       ended windows charged)
//	fresh: ws = start(now), prev = cur = carry = 0, where start(t) = t - (t mod W)
//	w = start(now); eff = now
//	if w < ws:  w = ws; eff = ws               -- a stale call counts against the newer window
//	elif w > ws: k = (w - ws)/W                -- k windows later; cur beyond L is carried:
//	    prev = min(L, max(0, cur - min(k-1, cur)*L)); cur = carry = max(0, cur - min(k, cur)*L)
//	e   = floor((eff - w) / slice)             -- 0 <= e < S
//	est = prev*(S - e) + cur*S                  -- the estimate, in units of 1/S event
//	if n <= 0 or n > L: unsatisfiable (state unchanged)
//	allowed = est + n*S <= L*S;  if allowed: cur = cur + n; est = est + n*S
//	Remaining  = floor(max(0, L*S - est) / S)
//	ResetAfter = w + (ceil(cur/L) + 1)*W - now if cur > 0, else w + W - now if prev > 0, else 0
//	store (w, prev, cur, carry)
//
// RetryAfter, when denied, is the earliest instant at which the same request passes:
//
//	if cur + n <= L and prev > 0:
//	    m = S - floor((L - cur - n)*S / prev)       -- first slice where prev's weight is low enough
//	    if m < S: retry = w + m*slice
//	if not found, in the first later window w + kW whose cur' leaves room for n, with
//	k = ceil(max(cur + n - L, 1)/L) and (prev', cur') as the roll makes them there:
//	    retry = w + kW                               if prev' == 0
//	    m = S - floor((L - cur' - n)*S / prev')
//	    retry = w + kW                               if m <= 0
//	    retry = w + kW + m*slice                     if 0 < m < S
//	    retry = w + (k+1)W                           otherwise (cur' + n == L: wait until prev' is gone)
//	RetryAfter = retry - now
//
// The largest intermediate is 3*L*S <= 3*10^15 < 2^53. Only a usage debt (see Settle) makes
// cur exceed L, or carry other than 0; below L the roll is the plain shift (prev, cur = cur, 0
// one window later).
//
// # State layout (41 bytes, 45 with a carry; v1: 17 bytes, 0x31, ws, prev, cur)
//
//	[0]     0x33 version
//	[1:25]  parameter block (limit, capacity = limit, window, max_delay 0; see RecordedConfig)
//	[25:33] ws,   int64 LE, Unix ns (a multiple of W)
//	[33:37] prev, uint32 LE
//	[37:41] cur,  uint32 LE (at most debtCeiling)
//	[41:45] carry, uint32 LE (at most cur), only when it is not 0
//
// # Configuration changes
//
// With R = min(R_old, L) (see the package documentation), the key has counted C = L - R in
// the window that contains tc, and nothing before it:
//
//	ws = tc - (tc mod W), prev = 0, cur = C
type SlidingWindowCounter struct {
	cc   counterCore
	ceil int64 // debtCeiling
	p    params
}

// counterSlices is S, the resolution of the previous window's weight.
const counterSlices = 1_000_000

const (
	counterSize      = hdrSize + 16
	counterSizeCarry = counterSize + 4
	counterSizeV1    = 17
)

type counterCore struct {
	w, slice int64
	lim      int64 // the limit (the ceiling for adaptive), used to clamp decoded counts
}

// init validates c and sets s up (newLimiter, and peekOld by value).
func (s *SlidingWindowCounter) init(c Config) error {
	if err := validateCommon(c, LimitCeiling); err != nil {
		return err
	}
	*s = SlidingWindowCounter{cc: newCounterCore(c), ceil: debtCeiling(c.Limit, int64(c.Window)),
		p: makeParams(c.Limit, c.Limit, c.Window, 0)}
	return nil
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

// roll is counterCore.roll with a cur beyond the limit (a usage debt) carried: each window
// that passes takes up to L of it, into prev and then out. What it carries is the new carry.
func (s *SlidingWindowCounter) roll(ws, prev, cur, carry int64, ok bool, now int64) (w, eff, p, c, cy int64) {
	w, eff, p, c = s.cc.roll(ws, prev, cur, ok, now)
	if !ok || w <= ws {
		return w, eff, p, c, carry
	}
	k, L := (w-ws)/s.cc.w, s.cc.lim
	p, c = min(L, max(0, cur-min(k-1, cur)*L)), max(0, cur-min(k, cur)*L)
	return w, eff, p, c, c
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
		d.ResetAfter = dur(w + (ceilDiv(cur, cc.lim)+1)*cc.w - now)
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
	// The first later window whose carried cur leaves room for n (see roll; below the limit k
	// is 1, prev is cur and cur is 0).
	k, L := ceilDiv(max(cur+n-limit, 1), cc.lim), cc.lim
	prev, cur = min(L, max(0, cur-(k-1)*L)), max(0, cur-k*L)
	next := w + k*cc.w
	if prev == 0 {
		return next
	}
	m := S - (limit-cur-n)*S/prev
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

// decode reads the fields at state[off:] (off from locate; 0: a fresh key, not ok), with prev
// clamped to the limit, cur to the debt ceiling and carry to cur.
func (s *SlidingWindowCounter) decode(state []byte, off int) (ws, prev, cur, carry int64, ok bool) {
	if off == 0 {
		return 0, 0, 0, 0, false
	}
	ws, prev, cur, ok = s.cc.decode(state[off:], s.ceil)
	if len(state) == counterSizeCarry {
		carry = min(get32(state[counterSize:]), cur)
	}
	return ws, min(prev, s.cc.lim), cur, carry, ok
}

func (s *SlidingWindowCounter) locate(state []byte) (off int, convert bool) {
	return s.p.locate(state, verSlidingCount2, counterSize, counterSizeCarry, verSlidingCount, counterSizeV1)
}

// AllowN implements Limiter; see the type documentation for the arithmetic.
func (s *SlidingWindowCounter) AllowN(state []byte, now int64, n int64) (Decision, []byte) {
	now = clampNow(now)
	off, conv := s.locate(state)
	if conv {
		return convert(s, state, now, n, s.cc.lim)
	}
	ws, prev, cur, carry, ok := s.decode(state, off)
	w, eff, prev, cur, carry := s.roll(ws, prev, cur, carry, ok, now)
	d, cur, store := s.cc.decide(w, eff, prev, cur, now, n, s.cc.lim)
	if !store {
		return d, state
	}
	return d, s.encode(state, w, prev, cur, carry)
}

func (s *SlidingWindowCounter) encode(state []byte, w, prev, cur, carry int64) []byte {
	out := windowOut(state, &s.p, verSlidingCount2, counterSize, carry)
	put64(out[hdrSize:], w)
	put32(out[hdrSize+8:], prev)
	put32(out[hdrSize+12:], cur)
	return out
}

// converted is the state of a key that consumed c at tc; see the type documentation.
func (s *SlidingWindowCounter) converted(c, tc int64) []byte {
	return s.encode(nil, tc-tc%s.cc.w, 0, c, 0)
}

// peek reports Remaining at now and the instant the estimate was taken at, for a state in s's
// current encoding with s's parameters.
func (s *SlidingWindowCounter) peek(state []byte, now int64) (r, at int64, ok bool) {
	off, _ := s.locate(state)
	ws, prev, cur, _, ok := s.decode(state, off)
	if off != hdrSize || !ok {
		return 0, 0, false
	}
	w, eff, prev, cur, _ := s.roll(ws, prev, cur, 0, true, now)
	d, _, _ := s.cc.decide(w, eff, prev, cur, now, 0, s.cc.lim)
	return d.Remaining, eff, true
}

// StateSize implements Limiter: a SlidingWindowCounter state is at most 45 bytes.
func (s *SlidingWindowCounter) StateSize() int { return counterSizeCarry }

// Idle implements Limiter: both counters are zero once rolled to now's window.
func (s *SlidingWindowCounter) Idle(state []byte, now int64) bool {
	now = clampNow(now)
	off, conv := s.locate(state)
	if conv {
		return idleConverted(state, now, s.cc.lim)
	}
	ws, prev, cur, _, ok := s.decode(state, off)
	_, _, p, c, _ := s.roll(ws, prev, cur, 0, ok, now)
	return p == 0 && c == 0
}
