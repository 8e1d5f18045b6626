package sharedstate

import (
	"github.com/dchest/siphash"

	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A key's digest is SipHash-2-4-128 of the key under the table's secret, its two halves
// little-endian, and the key's addressing hash is its second half: the same key under the same
// secret always has the same digest, and under another secret (another process) another one.
func TestKeyDigestIsTheKeysSipHash128(t *testing.T) {
	keys := []string{"", "a", "11:192.0.2.1", "12:192.0.2.1:55554:acme", strings.Repeat("\xff", 300)}
	seen := map[[DigestSize]byte]string{}
	for _, s := range [][2]uint64{{1, 2}, {3, 4}, {1, 5}} {
		for _, k := range keys {
			d, h := keyDigest(s[0], s[1], []byte(k))
			lo, hi := siphash.Hash128(s[0], s[1], []byte(k))
			require.Equal(t, lo, binary.LittleEndian.Uint64(d[:8]), "key %q", k)
			require.Equal(t, hi, binary.LittleEndian.Uint64(d[8:]), "key %q", k)
			require.Equal(t, hi, h, "key %q", k)
			again, _ := keyDigest(s[0], s[1], []byte(k))
			require.Equal(t, d, again)
			_, dup := seen[d]
			require.False(t, dup, "key %q under %v has the digest of %s", k, s, seen[d])
			seen[d] = k
		}
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { keyDigest(1, 2, []byte(keys[3])) }))
}

// What a key's digest costs, side by side with SHA-256 of the key (the digest of earlier
// versions of the table), on a key of the module's per-request benchmark and on a 1 KiB one.
// In Wasm, as the filter runs it:
//
//	go run ./wasmhost/cmd/wasmbench ./sharedstate -test.run '^$' -test.bench KeyDigest
func BenchmarkKeyDigest(b *testing.B) {
	for _, key := range [][]byte{[]byte("12:192.0.2.1:55554:acme"), []byte(strings.Repeat("k", 1024))} {
		b.Run(fmt.Sprint("siphash128/", len(key)), func(b *testing.B) {
			b.ReportAllocs()
			var h uint64
			for b.Loop() {
				_, x := keyDigest(0x0706050403020100, 0x0f0e0d0c0b0a0908, key)
				h += x
			}
			_ = h
		})
		b.Run(fmt.Sprint("sha256/", len(key)), func(b *testing.B) {
			b.ReportAllocs()
			var h byte
			for b.Loop() {
				sum := sha256.Sum256(key)
				h += sum[0]
			}
			_ = h
		})
	}
}
