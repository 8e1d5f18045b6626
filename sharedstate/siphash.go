package sharedstate

import (
	"encoding/binary"
	"math/bits"
)

// sipHash128 is SipHash-2-4 with its 128-bit output (Aumasson and Bernstein, "SipHash: a fast
// short-input PRF", 2012, and the reference implementation's 128-bit mode) of msg under the
// 128-bit key k0 || k1 (each half little-endian). The output's bytes are lo then hi, each
// little-endian.
//
// It makes a key's digest (see keyDigest): a keyed pseudorandom function, so that without the
// key nobody can compute a key's digest, find two keys with the same digest, or tell which
// slots a key may use. SipHash was designed for exactly this (hash-flooding resistant table
// indexing); for a 25-byte key it is 16 rounds of additions, rotations and xors on 64-bit
// words, which a Wasm VM runs natively, and allocates nothing. The test vectors of the
// reference implementation are in siphash_test.go.
func sipHash128(k0, k1 uint64, msg []byte) (lo, hi uint64) { return sipHash(k0, k1, msg, true) }

// sipHash24 is SipHash-2-4 with its 64-bit output of msg under the key k0 || k1.
func sipHash24(k0, k1 uint64, msg []byte) uint64 {
	h, _ := sipHash(k0, k1, msg, false)
	return h
}

// sipHash is SipHash-2-4 of msg under the key k0 || k1: with wide its 128-bit output (lo, hi),
// else its 64-bit output (lo). The two differ only in two constants and the second output's
// rounds, so one function serves both (one function for a Wasm VM to compile).
func sipHash(k0, k1 uint64, msg []byte, wide bool) (lo, hi uint64) {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	fin := uint64(0xff)
	if wide {
		v1 ^= 0xee
		fin = 0xee
	}
	n := len(msg)
	for len(msg) >= 8 {
		m := binary.LittleEndian.Uint64(msg)
		v3 ^= m
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= m
		msg = msg[8:]
	}
	// The last block holds the remaining bytes and, in its top byte, the length mod 256.
	m := uint64(n) << 56
	for i, c := range msg {
		m |= uint64(c) << (8 * i)
	}
	v3 ^= m
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= m
	v2 ^= fin
	for range 4 {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	lo = v0 ^ v1 ^ v2 ^ v3
	if !wide {
		return lo, 0
	}
	v1 ^= 0xdd
	for range 4 {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	return lo, v0 ^ v1 ^ v2 ^ v3
}

// SipHash24 is SipHash-2-4 of msg under the 128-bit key k0 || k1, for other packages that
// need a keyed hash clients cannot compute (package redis chooses a key's partition with it).
func SipHash24(k0, k1 uint64, msg []byte) uint64 { return sipHash24(k0, k1, msg) }

// sipRound is one SipRound of the SipHash specification.
func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13)
	v1 ^= v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16)
	v3 ^= v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21)
	v3 ^= v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17)
	v1 ^= v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
