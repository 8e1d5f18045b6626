package algorithms

// FixedWindow is fixed_window: time is cut into clock-aligned windows (a window starts at
// now − now mod Window, Unix time), and each window admits at most Limit events. It is the
// simplest and cheapest algorithm, with the known boundary burst: Limit events just before a
// window boundary and Limit more just after it pass within a few nanoseconds, 2×Limit in
// well under one window (a test demonstrates it). Aligning windows to the clock rather than
// to the key's first request keeps every worker and proxy on the same windows without
// coordination, and makes ResetAfter the same for everyone.
//
// # Arithmetic (the spec for the Lua port)
//
//	state: ws (absolute window start), count
//	w = now - (now mod W)
//	fresh: ws = w, count = 0
//	if w < ws: w = ws                 -- a stale call counts against the newer window
//	elif w > ws: count = 0
//	if n <= 0 or n > L: unsatisfiable (state unchanged)
//	allowed = count + n <= L;  if allowed: count = count + n
//	RetryAfter = w + W - now          when denied
//	Remaining  = L - count
//	ResetAfter = w + W - now if count > 0, else 0
//	store (w, count)
//
// # State layout (13 bytes)
//
//	[0]    0x51 version
//	[1:9]  ws,    int64 LE, Unix ns (a multiple of W)
//	[9:13] count, uint32 LE
type FixedWindow struct {
	limit, w int64
}

const fixedSize = 13

func newFixedWindow(c Config) (*FixedWindow, error) {
	if err := validateCommon(c, LimitCeiling, fieldSet{}); err != nil {
		return nil, err
	}
	return &FixedWindow{limit: c.Limit, w: int64(c.Window)}, nil
}

func (f *FixedWindow) load(state []byte, now int64) (w, count int64) {
	w = now - now%f.w
	if len(state) != fixedSize || state[0] != verFixedWindow {
		return w, 0
	}
	ws := get64(state[1:])
	if ws < 0 || ws > MaxTime || ws%f.w != 0 {
		return w, 0 // every start the limiter writes is aligned
	}
	switch {
	case w < ws:
		return ws, min(get32(state[9:]), f.limit)
	case w == ws:
		return w, min(get32(state[9:]), f.limit)
	default:
		return w, 0
	}
}

// AllowN implements Limiter; see the type documentation for the arithmetic.
func (f *FixedWindow) AllowN(state []byte, now int64, n int64) (Decision, []byte) {
	now = clampNow(now)
	w, count := f.load(state, now)
	d := Decision{Limit: f.limit}
	store := true
	switch {
	case n <= 0 || n > f.limit:
		store = false
	case count+n <= f.limit:
		count += n
		d.Allowed = true
	default:
		d.RetryAfter = dur(w + f.w - now)
	}
	d.Remaining = f.limit - count
	if count > 0 {
		d.ResetAfter = dur(w + f.w - now)
	}
	if !store {
		return d, state
	}
	out := outBuf(state, fixedSize, fixedSize)
	out[0] = verFixedWindow
	put64(out[1:], w)
	put32(out[9:], count)
	return d, out
}

// StateSize implements Limiter: a FixedWindow state is always 13 bytes.
func (f *FixedWindow) StateSize() int { return fixedSize }

// Idle implements Limiter: nothing was counted in now's window.
func (f *FixedWindow) Idle(state []byte, now int64) bool {
	_, count := f.load(state, clampNow(now))
	return count == 0
}
