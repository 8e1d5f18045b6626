package algorithms

import (
	"encoding/binary"
	"time"
)

// Version bytes. Each algorithm and layout has its own so that a state written by one is never
// decoded by another (a rule whose algorithm changed starts its keys fresh). 0x00 and 0xFF are
// avoided because zero-filled or erased buffers commonly start with them.
const (
	verTokenBucket   = 0x11
	verLeakyMeter    = 0x21
	verLeakyShaper   = 0x22
	verSlidingCount  = 0x31
	verSlidingLog32  = 0x41 // 4-byte deltas (Window < 2^32 ns)
	verSlidingLog64  = 0x42 // 8-byte deltas
	verFixedWindow   = 0x51
	verGCRA          = 0x61
	verAdaptiveAdmit = 0x71
	verAdaptiveCtrl  = 0x72
)

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ceilDiv returns ceil(a/b) for a >= 0 and b > 0, written as the floor division the Lua port
// uses.
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

// validStamp reports whether a decoded absolute timestamp is in the range a limiter can write.
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
