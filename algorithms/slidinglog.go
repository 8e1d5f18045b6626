package algorithms

import "math"

// SlidingWindowLog is sliding_window with the log variant: the exact sliding window. It keeps
// the timestamp of every admitted event of the last Window and admits n events at now when the
// events in (now − Window, now] plus n are at most Limit, so no interval of length Window ever
// holds more than Limit admitted events.
//
// RetryAfter is the sliding log's usual wait (oldest event + Window − now) generalised to n:
// the k-th oldest live timestamp + Window − now, when k = live + n − Limit events must expire
// first. An event at t leaves the window at exactly t + Window.
//
// # State
//
// The timestamps are stored oldest first as the oldest and newest absolute instants plus the
// deltas between consecutive events. A delta between two events of one window is below Window,
// so it fits in 4 bytes when Window < 2^32 ns (about 4.29s) and takes 8 bytes otherwise (the
// version byte tells which). n events admitted together are n equal timestamps (n−1 zero
// deltas). The state grows and shrinks with the number of live events: a quiet key costs 43
// bytes, Limit live events 43 + (Limit−1)×width bytes, which is why Limit is bounded by
// LogLimitCeiling (1024). Dropping expired events is a prefix cut (one memmove) and admitting
// appends at the end, in place in the caller's buffer.
//
//	[0]     0x43 (4-byte deltas) or 0x44 (8-byte deltas) version
//	[1:25]  parameter block (limit, capacity = limit, window, max_delay 0; see RecordedConfig)
//	[25:27] count, uint16 LE, number of stored timestamps
//	[27:35] oldest, int64 LE, Unix ns (meaningless when count == 0)
//	[35:43] newest, int64 LE, Unix ns
//	[43:]   count−1 deltas, uint32 or uint64 LE: delta[i] = t[i+1] − t[i]
//
// The v1 layout (0x41 or 0x42, then count, oldest, newest and the deltas from byte 1; no parameters)
// is still read, with the current parameters, and rewritten in this layout by the next
// admitted request.
//
// A state whose length does not match its count, or whose timestamps are out of order or out
// of range, is a fresh key; a delta that is not below Window, or that walks past newest, is
// found while pruning and also makes the state fresh.
//
// # Arithmetic (the spec for the Lua port)
//
//	eff = max(now, newest) if count > 0 else now    -- a stale call is evaluated at newest
//	drop the leading timestamps t <= eff - W        -- t[0] = oldest, t[i+1] = t[i] + delta[i]
//	live = count - dropped
//	if n <= 0 or n > L: unsatisfiable (state unchanged)
//	allowed = live + n <= L:
//	    if live == 0: oldest = eff; deltas = (n-1) zeros
//	    else: deltas = remaining deltas, then eff - newest, then (n-1) zeros
//	    newest = eff; count = live + n
//	denied: k = live + n - L; RetryAfter = t[dropped + k - 1] + W - now (state unchanged)
//	Remaining  = L - live (after admitting)
//	ResetAfter = newest + W - now if live > 0, else 0
//
// Only additions of deltas below W to a timestamp and differences of timestamps occur.
//
// # Configuration changes
//
// With R = min(R_old, L) (see the package documentation), the key holds C = L - R timestamps,
// all equal to tc (oldest = newest = tc, C−1 zero deltas; no timestamp when C = 0).
type SlidingWindowLog struct {
	limit, w   int64
	width      int
	ver, verV1 byte
	p          params
}

const (
	logHeader   = hdrSize + 18 // 43: the header, count, oldest and newest
	logHeaderV1 = 19
)

// init validates c and sets l up (newLimiter, and peekOld by value).
func (l *SlidingWindowLog) init(c Config) error {
	if err := validateCommon(c, LogLimitCeiling); err != nil {
		return err
	}
	*l = SlidingWindowLog{limit: c.Limit, w: int64(c.Window), width: 8, ver: verSlidingLog64v2, verV1: verSlidingLog64,
		p: makeParams(c.Limit, c.Limit, c.Window, 0)}
	if l.w <= math.MaxUint32 {
		l.width, l.ver, l.verV1 = 4, verSlidingLog32v2, verSlidingLog32
	}
	return nil
}

// StateSize implements Limiter: 43 + (Limit−1) × (4 or 8) bytes, the size with Limit live
// events.
func (l *SlidingWindowLog) StateSize() int { return logHeader + int(l.limit-1)*l.width }

// delta reads delta[i] of a state whose header is h bytes long.
func (l *SlidingWindowLog) delta(state []byte, h int, i int64) int64 {
	off := h + int(i)*l.width
	if l.width == 4 {
		return get32(state[off:])
	}
	return get64(state[off:])
}

func (l *SlidingWindowLog) putDelta(out []byte, i int64, v int64) {
	off := logHeader + int(i)*l.width
	if l.width == 4 {
		put32(out[off:], v)
	} else {
		put64(out[off:], v)
	}
}

// header decodes and checks the fixed part of a state: h is the length of its header
// (logHeader for the current encoding with l's parameters, logHeaderV1 for the v1 one, 0 when
// it is neither), and convert is true when it is a current encoding to convert.
func (l *SlidingWindowLog) header(state []byte) (h int, count, oldest, newest int64, ok, convert bool) {
	switch {
	case len(state) >= logHeader && l.p.matches(state, l.ver):
		h = logHeader
	case len(state) >= logHeaderV1 && state[0] == l.verV1:
		h = logHeaderV1
	default:
		return 0, 0, 0, 0, false, isCurrent(state)
	}
	b := h - 18
	count = int64(state[b]) | int64(state[b+1])<<8
	oldest, newest = get64(state[b+2:]), get64(state[b+10:])
	if int64(len(state)) != int64(h)+max(count-1, 0)*int64(l.width) {
		return 0, 0, 0, 0, false, false
	}
	if count > 0 && (oldest < 0 || oldest > newest || newest > MaxTime || (count == 1 && oldest != newest)) {
		return 0, 0, 0, 0, false, false
	}
	return h, count, oldest, newest, true, false
}

// prune skips the timestamps at or before cutoff. It returns how many were dropped and the
// oldest remaining timestamp, or ok == false when the deltas are inconsistent.
func (l *SlidingWindowLog) prune(state []byte, h int, count, oldest, newest, cutoff int64) (dropped, first int64, ok bool) {
	t := oldest
	for dropped < count && t <= cutoff {
		if dropped+1 < count {
			d := l.delta(state, h, dropped)
			if d < 0 || d >= l.w || t+d > newest {
				return 0, 0, false
			}
			t += d
		}
		dropped++
	}
	if dropped == count-1 && t != newest {
		return 0, 0, false // the deltas do not lead to newest
	}
	return dropped, t, true
}

// AllowN implements Limiter; see the type documentation for the arithmetic.
func (l *SlidingWindowLog) AllowN(state []byte, now int64, n int64) (Decision, []byte) {
	now = clampNow(now)
	h, count, oldest, newest, ok, conv := l.header(state)
	if conv {
		return convert(l, state, now, n, l.limit)
	}
	eff := now
	var dropped, first int64
	if ok && count > 0 {
		eff = max(now, newest)
		dropped, first, ok = l.prune(state, h, count, oldest, newest, eff-l.w)
	}
	if !ok {
		count, dropped = 0, 0
	}
	live := count - dropped
	d := Decision{Limit: l.limit}
	if n <= 0 || n > l.limit || live+n > l.limit {
		d.Remaining = max(0, l.limit-live)
		if live > 0 { // always so for a denial that is not unsatisfiable
			d.ResetAfter = dur(newest + l.w - now)
		}
		if n <= 0 || n > l.limit {
			return d, state
		}
		// The k-th oldest live timestamp must leave the window first.
		t := first
		for i := range live + n - l.limit - 1 {
			// These deltas were not walked by prune: clamp instead of trusting them, so a
			// corrupt state cannot overflow or produce a wait beyond newest + Window.
			if d := l.delta(state, h, dropped+i); d >= 0 && d < l.w {
				t = min(t+d, newest)
			}
		}
		d.RetryAfter = dur(t + l.w - now)
		return d, state
	}
	d.Allowed = true
	newCount := live + n
	out := outBuf(state, logHeader+int(newCount-1)*l.width, l.StateSize())
	if live == 0 {
		first = eff
		clear(out[logHeader:])
	} else {
		// Keep deltas [dropped, count-1), then the gap to eff, then n-1 zeros. copy is a
		// memmove, so the in-place shift is safe when out aliases state.
		if &out[0] != &state[0] || dropped > 0 || h != logHeader {
			copy(out[logHeader:], state[h+int(dropped)*l.width:h+int(count-1)*l.width])
		}
		l.putDelta(out, live-1, eff-newest)
		clear(out[logHeader+int(live)*l.width:])
	}
	l.putHeader(out, newCount, first, eff)
	d.Remaining = l.limit - newCount
	d.ResetAfter = dur(eff + l.w - now)
	return d, out
}

func (l *SlidingWindowLog) putHeader(out []byte, count, oldest, newest int64) {
	l.p.put(out, l.ver)
	out[hdrSize], out[hdrSize+1] = byte(count), byte(count>>8)
	put64(out[hdrSize+2:], oldest)
	put64(out[hdrSize+10:], newest)
}

// converted is the state of a key that consumed c at tc; see the type documentation.
func (l *SlidingWindowLog) converted(c, tc int64) []byte {
	out := make([]byte, logHeader+int(max(c-1, 0))*l.width, l.StateSize())
	l.putHeader(out, c, tc, tc) // the deltas are zero
	return out
}

// peek reports the events that still fit at now and the instant they were counted at
// (max(now, newest)), for a state in l's current encoding with l's parameters.
func (l *SlidingWindowLog) peek(state []byte, now int64) (r, at int64, ok bool) {
	h, count, oldest, newest, ok, _ := l.header(state)
	if !ok || h != logHeader {
		return 0, 0, false
	}
	if count == 0 {
		return l.limit, now, true
	}
	eff := max(now, newest)
	dropped, _, ok := l.prune(state, h, count, oldest, newest, eff-l.w)
	if !ok {
		return 0, 0, false
	}
	return max(0, l.limit-(count-dropped)), eff, true
}

// Idle implements Limiter: no timestamp is left in the window at now.
func (l *SlidingWindowLog) Idle(state []byte, now int64) bool {
	now = clampNow(now)
	_, count, _, newest, ok, conv := l.header(state)
	if conv {
		return idleConverted(state, now, l.limit)
	}
	if !ok || count == 0 {
		return true
	}
	return newest <= max(now, newest)-l.w
}
