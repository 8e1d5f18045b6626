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
//	state: ws (absolute window start), count, carry (the part of count ended windows charged)
//	w = now - (now mod W)
//	fresh: ws = w, count = carry = 0
//	if w <= ws: w = ws                -- a stale call counts against the newer window
//	else: count = carry = max(0, count - min(k, count)*L), k = (w - ws)/W
//	if n <= 0 or n > L: unsatisfiable (state unchanged)
//	allowed = count + n <= L;  if allowed: count = count + n
//	RetryAfter = w + ceil((count + n - L)/L)*W - now     when denied (count + n > L)
//	Remaining  = max(0, L - count)
//	ResetAfter = w + ceil(count/L)*W - now if count > 0, else 0
//	store (w, count, carry)
//
// Only a usage debt (see Settle) makes count exceed L, or carry other than 0: each window that
// passes repays L of it, so a key that was charged 3L in one window is denied for the next
// two. Below L, the roll is the plain reset to 0.
//
// # State layout (37 bytes, 41 with a carry; v1: 13 bytes, 0x51, ws, count)
//
//	[0]     0x53 version
//	[1:25]  parameter block (limit, capacity = limit, window, max_delay 0; see RecordedConfig)
//	[25:33] ws,    int64 LE, Unix ns (a multiple of W)
//	[33:37] count, uint32 LE (at most debtCeiling)
//	[37:41] carry, uint32 LE (at most count), only when it is not 0
//
// # Configuration changes
//
// With R = min(R_old, L) (see the package documentation), the key has counted C = L - R in
// the window that contains tc:
//
//	ws = tc - (tc mod W), count = C
type FixedWindow struct {
	limit, w, ceil int64 // ceil: debtCeiling
	p              params
}

const (
	fixedSize      = hdrSize + 12
	fixedSizeCarry = fixedSize + 4
	fixedSizeV1    = 13
)

// init validates c and sets f up (newLimiter, and peekOld by value).
func (f *FixedWindow) init(c Config) error {
	if err := validateCommon(c, LimitCeiling); err != nil {
		return err
	}
	w := int64(c.Window)
	*f = FixedWindow{limit: c.Limit, w: w, ceil: debtCeiling(c.Limit, w), p: makeParams(c.Limit, c.Limit, c.Window, 0)}
	return nil
}

// load returns the window of now, its count and carry, from the fields at state[off:] (off ==
// 0: a fresh key).
func (f *FixedWindow) load(state []byte, off int, now int64) (w, count, carry int64) {
	w = now - now%f.w
	if off == 0 {
		return w, 0, 0
	}
	ws := get64(state[off:])
	if ws < 0 || ws > MaxTime || ws%f.w != 0 {
		return w, 0, 0 // every start the limiter writes is aligned
	}
	count = min(get32(state[off+8:]), f.ceil)
	if w > ws {
		count = max(0, count-min((w-ws)/f.w, count)*f.limit)
		return w, count, count
	}
	if len(state) == fixedSizeCarry {
		carry = min(get32(state[off+12:]), count)
	}
	return ws, count, carry
}

func (f *FixedWindow) locate(state []byte) (off int, convert bool) {
	return f.p.locate(state, verFixedWindow2, fixedSize, fixedSizeCarry, verFixedWindow, fixedSizeV1)
}

// AllowN implements Limiter; see the type documentation for the arithmetic.
func (f *FixedWindow) AllowN(state []byte, now int64, n int64) (Decision, []byte) {
	now = clampNow(now)
	off, conv := f.locate(state)
	if conv {
		return convert(f, state, now, n, f.limit)
	}
	w, count, carry := f.load(state, off, now)
	d := Decision{Limit: f.limit}
	store := true
	switch {
	case n <= 0 || n > f.limit:
		store = false
	case count+n <= f.limit:
		count += n
		d.Allowed = true
	default:
		d.RetryAfter = dur(w + ceilDiv(count+n-f.limit, f.limit)*f.w - now)
	}
	d.Remaining = max(0, f.limit-count)
	if count > 0 {
		d.ResetAfter = dur(w + ceilDiv(count, f.limit)*f.w - now)
	}
	if !store {
		return d, state
	}
	return d, f.encode(state, w, count, carry)
}

func (f *FixedWindow) encode(state []byte, w, count, carry int64) []byte {
	out := windowOut(state, &f.p, verFixedWindow2, fixedSize, carry)
	put64(out[hdrSize:], w)
	put32(out[hdrSize+8:], count)
	return out
}

// windowOut returns the buffer of a window's state of size bytes, header written, and of 4
// more holding carry when carry is not 0.
func windowOut(state []byte, p *params, ver byte, size int, carry int64) []byte {
	n := size
	if carry > 0 {
		n += 4
	}
	out := outBuf(state, n, size+4)
	p.put(out, ver)
	if carry > 0 {
		put32(out[size:], carry)
	}
	return out
}

// converted is the state of a key that consumed c at tc; see the type documentation.
func (f *FixedWindow) converted(c, tc int64) []byte { return f.encode(nil, tc-tc%f.w, c, 0) }

// peek reports the events left in now's window, for a state in f's current encoding with f's
// parameters, and the instant it counted for: now, or the start of the stored window when
// that is later.
func (f *FixedWindow) peek(state []byte, now int64) (r, at int64, ok bool) {
	if off, _ := f.locate(state); off != hdrSize {
		return 0, 0, false
	}
	w, count, _ := f.load(state, hdrSize, now)
	return f.limit - count, max(now, w), true
}

// StateSize implements Limiter: a FixedWindow state is at most 41 bytes.
func (f *FixedWindow) StateSize() int { return fixedSizeCarry }

// Idle implements Limiter: nothing was counted in now's window.
func (f *FixedWindow) Idle(state []byte, now int64) bool {
	now = clampNow(now)
	off, conv := f.locate(state)
	if conv {
		return idleConverted(state, now, f.limit)
	}
	_, count, _ := f.load(state, off, now)
	return count == 0
}
