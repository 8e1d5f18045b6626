package sharedstate

import (
	"encoding/binary"

	"github.com/dchest/siphash"
)

// keyDigest returns the digest key is stored under in a table keyed with (k0, k1) (see Table),
// and the key's addressing hash h: SipHash-2-4's 128-bit output of the key under the table's
// secret, its first 8 bytes the key's fingerprint in a group index, its last 8 bytes h.
//
// The digest is the key's identity: a key whose digest a slot holds owns that slot, so two
// keys with one digest would share an allowance. Without the secret (LoadSecret: random per
// process, never sent anywhere) a client can neither compute digests nor test candidate keys
// offline, so two keys share a digest with probability about n^2 / 2^129 for n keys, whoever
// chooses them. SipHash is the function the table needs anyway to address slots without
// letting clients aim at them, and in a Wasm VM it costs 133-150 ns for a 23-byte key, where
// SHA-256 of it costs 2.8-4.3 us (BenchmarkKeyDigest, run with wasmbench). The digest is the
// same in every worker VM of a process and changes with the process, as shared data does.
func keyDigest(k0, k1 uint64, key []byte) (d [DigestSize]byte, h uint64) {
	lo, hi := siphash.Hash128(k0, k1, key)
	binary.LittleEndian.PutUint64(d[:8], lo)
	binary.LittleEndian.PutUint64(d[8:], hi)
	return d, hi
}
