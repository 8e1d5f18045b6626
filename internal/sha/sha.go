// Package sha computes SHA-256 and SHA-1 (FIPS 180-4) in plain Go, for the filter's .wasm.
//
// The standard crypto/sha256 and crypto/sha1 compute the same sums, but importing them links
// Go's FIPS 140 module into the binary (its self-tests, DRBG, AES-GCM, SHA-3, SHA-512, HMAC and
// crypto/rand), about 0.6 MB of a wasip1 module that needs none of it: on wasm both packages run
// the same generic block functions as this one, so nothing is slower. The sums are identical
// (tests compare them with the standard packages on every length up to several blocks), which
// is what matters here: the key digests in shared data, the hashed Redis keys and the scripts'
// EVALSHA names must stay exactly what every other version of the filter computes.
//
// Neither function allocates.
package sha

import (
	"encoding/binary"
	"math/bits"
)

var k256 = [64]uint32{
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

// padded returns the last one or two blocks of msg's Merkle-Damgard padding, which SHA-1 and
// SHA-256 share: the bytes after the last whole block, a 1 bit, zeros, and the message length
// in bits as a big-endian uint64. The whole blocks before it are hashed straight from msg.
func padded(msg []byte) (last [128]byte, n int) {
	rest := msg[len(msg)&^63:]
	copy(last[:], rest)
	last[len(rest)] = 0x80
	n = 64
	if len(rest) >= 56 {
		n = 128
	}
	binary.BigEndian.PutUint64(last[n-8:], uint64(len(msg))<<3)
	return last, n
}

// Sum256 returns the SHA-256 sum of msg, equal to crypto/sha256.Sum256(msg).
func Sum256(msg []byte) [32]byte {
	h := [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}
	last, n := padded(msg)
	for i := 0; i < len(msg)&^63; i += 64 {
		block256(&h, (*[64]byte)(msg[i:i+64]))
	}
	for i := 0; i < n; i += 64 {
		block256(&h, (*[64]byte)(last[i:i+64]))
	}
	var out [32]byte
	for i, v := range h {
		binary.BigEndian.PutUint32(out[4*i:], v)
	}
	return out
}

// block256 is SHA-256's compression function on one block.
func block256(h *[8]uint32, p *[64]byte) {
	var w [64]uint32
	for i := 0; i < 16; i++ {
		w[i] = binary.BigEndian.Uint32(p[4*i:])
	}
	for i := 16; i < 64; i++ {
		v1, v2 := w[i-2], w[i-15]
		s1 := bits.RotateLeft32(v1, -17) ^ bits.RotateLeft32(v1, -19) ^ (v1 >> 10)
		s0 := bits.RotateLeft32(v2, -7) ^ bits.RotateLeft32(v2, -18) ^ (v2 >> 3)
		w[i] = s1 + w[i-7] + s0 + w[i-16]
	}
	a, b, c, d, e, f, g, hh := h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
	for i := 0; i < 64; i++ {
		t1 := hh + (bits.RotateLeft32(e, -6) ^ bits.RotateLeft32(e, -11) ^ bits.RotateLeft32(e, -25)) +
			((e & f) ^ (^e & g)) + k256[i] + w[i]
		t2 := (bits.RotateLeft32(a, -2) ^ bits.RotateLeft32(a, -13) ^ bits.RotateLeft32(a, -22)) +
			((a & b) ^ (a & c) ^ (b & c))
		hh, g, f, e, d, c, b, a = g, f, e, d+t1, c, b, a, t1+t2
	}
	h[0] += a
	h[1] += b
	h[2] += c
	h[3] += d
	h[4] += e
	h[5] += f
	h[6] += g
	h[7] += hh
}

// Sum1 returns the SHA-1 sum of msg, equal to crypto/sha1.Sum(msg). It names Redis scripts
// (EVALSHA), not anything an attacker chooses, so SHA-1's broken collision resistance does not
// matter here.
func Sum1(msg []byte) [20]byte {
	h := [5]uint32{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0}
	last, n := padded(msg)
	for i := 0; i < len(msg)&^63; i += 64 {
		block1(&h, (*[64]byte)(msg[i:i+64]))
	}
	for i := 0; i < n; i += 64 {
		block1(&h, (*[64]byte)(last[i:i+64]))
	}
	var out [20]byte
	for i, v := range h {
		binary.BigEndian.PutUint32(out[4*i:], v)
	}
	return out
}

// block1 is SHA-1's compression function on one block.
func block1(h *[5]uint32, p *[64]byte) {
	var w [80]uint32
	for i := 0; i < 16; i++ {
		w[i] = binary.BigEndian.Uint32(p[4*i:])
	}
	for i := 16; i < 80; i++ {
		w[i] = bits.RotateLeft32(w[i-3]^w[i-8]^w[i-14]^w[i-16], 1)
	}
	a, b, c, d, e := h[0], h[1], h[2], h[3], h[4]
	for i := 0; i < 80; i++ {
		var f, k uint32
		switch {
		case i < 20:
			f, k = (b&c)|(^b&d), 0x5a827999
		case i < 40:
			f, k = b^c^d, 0x6ed9eba1
		case i < 60:
			f, k = (b&c)|(b&d)|(c&d), 0x8f1bbcdc
		default:
			f, k = b^c^d, 0xca62c1d6
		}
		t := bits.RotateLeft32(a, 5) + f + e + k + w[i]
		a, b, c, d, e = t, a, bits.RotateLeft32(b, 30), c, d
	}
	h[0] += a
	h[1] += b
	h[2] += c
	h[3] += d
	h[4] += e
}
