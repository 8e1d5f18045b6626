package algorithms

import "math"

// SlidingWindowLog is sliding_window with the log variant: the exact sliding window. It keeps
// the timestamp of every admitted event of the last Window and admits n events at now when the
// events in (now − Window, now] plus n are at most Limit, so no interval of length Window ever
// holds more than Limit admitted events.
//
// RetryAfter is the seed's formula generalised to n: when k = live + n − Limit events must
// expire first, RetryAfter = (k-th oldest live timestamp) + Window − now; for n = 1 that is
// oldest + Window − now. An event at t leaves the window at exactly t + Window.
//
// # State
//
// The timestamps are stored oldest first as the oldest and newest absolute instants plus the
// deltas between consecutive events. A delta between two events of one window is below Window,
// so it fits in 4 bytes when Window < 2^32 ns (about 4.29s) and takes 8 bytes otherwise (the
// version byte tells which). n events admitted together are n equal timestamps (n−1 zero
// deltas). The state grows and shrinks with the number of live events, so a quiet key costs
// 19 bytes; the largest state, Limit live events, is 19 + (Limit−1)×width bytes, which is why
// Limit is bounded by LogLimitCeiling (1024). Dropping expired events is a prefix cut (one
// memmove) and admitting appends at the end, in place in the caller's buffer.
//
//	[0]     0x41 (4-byte deltas) or 0x42 (8-byte deltas) version
//	[1:3]   count, uint16 LE, number of stored timestamps
//	[3:11]  oldest, int64 LE, Unix ns (meaningless when count == 0)
//	[11:19] newest, int64 LE, Unix ns
//	[19:]   count−1 deltas, uint32 or uint64 LE: delta[i] = t[i+1] − t[i]
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
type SlidingWindowLog struct {
	limit, w int64
	width    int
	ver      byte
}

const logHeader = 19

func newSlidingWindowLog(c Config) (*SlidingWindowLog, error) {
	if err := validateCommon(c, LogLimitCeiling, fieldSet{}); err != nil {
		return nil, err
	}
	l := &SlidingWindowLog{limit: c.Limit, w: int64(c.Window), width: 8, ver: verSlidingLog64}
	if l.w <= math.MaxUint32 {
		l.width, l.ver = 4, verSlidingLog32
	}
	return l, nil
}

// StateSize implements Limiter: 19 + (Limit−1) × (4 or 8) bytes, the size with Limit live
// events.
func (l *SlidingWindowLog) StateSize() int { return logHeader + int(l.limit-1)*l.width }

func (l *SlidingWindowLog) delta(state []byte, i int64) int64 {
	off := logHeader + int(i)*l.width
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

// header decodes and checks the fixed part of a state.
func (l *SlidingWindowLog) header(state []byte) (count, oldest, newest int64, ok bool) {
	if len(state) < logHeader || state[0] != l.ver {
		return 0, 0, 0, false
	}
	count = int64(state[1]) | int64(state[2])<<8
	oldest, newest = get64(state[3:]), get64(state[11:])
	if int64(len(state)) != logHeader+max(count-1, 0)*int64(l.width) {
		return 0, 0, 0, false
	}
	if count > 0 && (oldest < 0 || oldest > newest || newest > MaxTime || (count == 1 && oldest != newest)) {
		return 0, 0, 0, false
	}
	return count, oldest, newest, true
}

// prune skips the timestamps at or before cutoff. It returns how many were dropped and the
// oldest remaining timestamp, or ok == false when the deltas are inconsistent.
func (l *SlidingWindowLog) prune(state []byte, count, oldest, newest, cutoff int64) (dropped, first int64, ok bool) {
	t := oldest
	for dropped < count && t <= cutoff {
		if dropped+1 < count {
			d := l.delta(state, dropped)
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
	count, oldest, newest, ok := l.header(state)
	eff := now
	var dropped, first int64
	if ok && count > 0 {
		eff = max(now, newest)
		dropped, first, ok = l.prune(state, count, oldest, newest, eff-l.w)
	}
	if !ok {
		count, dropped = 0, 0
	}
	live := count - dropped
	d := Decision{Limit: l.limit}
	switch {
	case n <= 0 || n > l.limit:
		d.Remaining = max(0, l.limit-live)
		if live > 0 {
			d.ResetAfter = dur(newest + l.w - now)
		}
		return d, state
	case live+n > l.limit:
		// The k-th oldest live timestamp must leave the window first.
		k := live + n - l.limit
		t := first
		for i := int64(0); i < k-1; i++ {
			// These deltas were not walked by prune: clamp instead of trusting them, so a
			// corrupt state cannot overflow or produce a wait beyond newest + Window.
			if d := l.delta(state, dropped+i); d >= 0 && d < l.w {
				t = min(t+d, newest)
			}
		}
		d.RetryAfter = dur(t + l.w - now)
		d.Remaining = max(0, l.limit-live)
		d.ResetAfter = dur(newest + l.w - now)
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
		if &out[0] != &state[0] || dropped > 0 {
			copy(out[logHeader:], state[logHeader+int(dropped)*l.width:logHeader+int(count-1)*l.width])
		}
		l.putDelta(out, live-1, eff-newest)
		clear(out[logHeader+int(live)*l.width:])
	}
	out[0] = l.ver
	out[1], out[2] = byte(newCount), byte(newCount>>8)
	put64(out[3:], first)
	put64(out[11:], eff)
	d.Remaining = l.limit - newCount
	d.ResetAfter = dur(eff + l.w - now)
	return d, out
}

// Idle implements Limiter: no timestamp is left in the window at now.
func (l *SlidingWindowLog) Idle(state []byte, now int64) bool {
	count, _, newest, ok := l.header(state)
	if !ok || count == 0 {
		return true
	}
	return newest <= max(clampNow(now), newest)-l.w
}
