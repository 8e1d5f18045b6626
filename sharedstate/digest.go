package sharedstate

import (
	"encoding/binary"

	"github.com/dchest/siphash"
)

// keyDigest returns the digest key is stored under in a table keyed with (k0, k1) (see Table),
// and the key's addressing hash h: SipHash-2-4's 128-bit output of the key under the table's
// secret, its first 8 bytes the key's fingerprint in a group index, its last 8 bytes h.
//
// The digest is the key's identity: a slot holds it in front of the key's state, and a key
// whose digest a slot holds owns that slot. Two keys with one digest would share an allowance,
// so the digest must be 128 bits that no client can make collide. A keyed pseudorandom
// function gives that without the cost of a cryptographic hash of the key: without the secret
// (LoadSecret: drawn at random in each process, kept in shared data, never sent anywhere) a
// client can neither compute digests nor test candidate keys offline, so two keys share a
// digest with probability about n^2 / 2^129 for n keys, whoever chooses them. SipHash is the
// function the table needs anyway to address slots without letting clients aim at them, and
// in a Wasm VM it costs 133-150 ns for a 23-byte key, where SHA-256 of it (a digest no secret
// protects, which would need a cache to be affordable) costs 2.8-4.3 us: its 64 rounds of 32-bit
// arithmetic are what no runtime speeds up (BenchmarkKeyDigest, run with wasmbench).
//
// The digest is the same in every worker VM of a process (they share the secret) and changes
// with the process: shared data does not outlive it either.
func keyDigest(k0, k1 uint64, key []byte) (d [DigestSize]byte, h uint64) {
	lo, hi := siphash.Hash128(k0, k1, key)
	binary.LittleEndian.PutUint64(d[:8], lo)
	binary.LittleEndian.PutUint64(d[8:], hi)
	return d, hi
}
