package sharedstate

import (
	"encoding/binary"
	"math/bits"
)

// sipHash24 is SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012)
// of msg under the 128-bit key k0 || k1 (each half little-endian), with its 64-bit output.
//
// It addresses slots: a keyed pseudorandom function of the key digest, so that which slots a
// key may use cannot be computed without the secret, and colliding keys cannot be searched
// for offline. SipHash was designed for exactly this (hash-flooding resistant table indexing),
// costs a few dozen additions, rotations and xors for a 16-byte input, and allocates nothing.
// The test vectors of the paper's reference implementation are in siphash_test.go.
func sipHash24(k0, k1 uint64, msg []byte) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
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
	v2 ^= 0xff
	for range 4 {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	return v0 ^ v1 ^ v2 ^ v3
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
