package algorithms

import (
	"encoding/binary"
	"time"
)

// Version bytes, one per algorithm and layout (see the package documentation); 0x00 and 0xFF
// are avoided because zero-filled or erased buffers commonly start with them. The current
// encodings (low nibble 3 or 4) record their parameters (see params); the first ("v1", low
// nibble 1 or 2) did not.
const (
	verTokenBucket   = 0x11 // v1
	verLeakyMeter    = 0x21 // v1
	verLeakyShaper   = 0x22 // v1
	verSlidingCount  = 0x31 // v1
	verSlidingLog32  = 0x41 // v1, 4-byte deltas (Window < 2^32 ns)
	verSlidingLog64  = 0x42 // v1, 8-byte deltas
	verFixedWindow   = 0x51 // v1
	verGCRA          = 0x61 // v1
	verAdaptiveAdmit = 0x71 // v1
	verAdaptiveCtrl  = 0x72 // the controller state; it is per rule and records no parameters

	verTokenBucket2   = 0x13
	verLeakyMeter2    = 0x23
	verLeakyShaper2   = 0x24
	verSlidingCount2  = 0x33
	verSlidingLog32v2 = 0x43
	verSlidingLog64v2 = 0x44
	verFixedWindow2   = 0x53
	verGCRA2          = 0x63
	verAdaptiveAdmit2 = 0x73
)

// GCD is Euclid's greatest common divisor of two non-negative numbers, not both zero. The
// limiters use it to reduce a rate Limit/Window to lowest terms (see rateScale), and the filter
// to state a rate as a whole quota per whole seconds in RateLimit-Policy.
func GCD(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ceilDiv returns ceil(a/b) for a >= 0 and b > 0, as the Lua port writes it.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// clampNow keeps now in [0, MaxTime]; see the package documentation.
func clampNow(now int64) int64 {
	if now < 0 {
		return 0
	}
	if now > MaxTime {
		return MaxTime
	}
	return now
}

// validStamp reports whether a decoded timestamp is in the range a limiter can write.
func validStamp(t int64) bool { return t >= 0 && t <= maxStamp }

func get64(b []byte) int64    { return int64(binary.LittleEndian.Uint64(b)) }
func put64(b []byte, v int64) { binary.LittleEndian.PutUint64(b, uint64(v)) }
func get32(b []byte) int64    { return int64(binary.LittleEndian.Uint32(b)) }
func put32(b []byte, v int64) { binary.LittleEndian.PutUint32(b, uint32(v)) }

// outBuf returns a slice of length size to encode a new state into: state's own array when its
// capacity allows (the documented aliasing), otherwise a new buffer with capacity max so that
// the next call with it does not allocate.
func outBuf(state []byte, size, max int) []byte {
	if cap(state) >= size {
		return state[:size]
	}
	return make([]byte, size, max)
}

func dur(ns int64) time.Duration { return time.Duration(ns) }
