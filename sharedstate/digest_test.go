package sharedstate_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/stretchr/testify/require"
)

// The digest is the first 16 bytes of SHA-256: slots written by any version of the filter are
// found by every other.
func TestDigestIsSHA256Prefix(t *testing.T) {
	for _, k := range []string{"", "a", "11:192.0.2.1", string(bytes.Repeat([]byte{0xff}, 300))} {
		sum := sha256.Sum256([]byte(k))
		require.Equal(t, [sharedstate.DigestSize]byte(sum[:sharedstate.DigestSize]), sharedstate.Digest([]byte(k)))
	}
}

// A cache always returns the key's own digest, whether the key is cached, was evicted by
// another key in its entry, is too long to cache, or is the empty key; a nil cache computes.
func TestDigestCacheReturnsTheKeysDigest(t *testing.T) {
	c := sharedstate.NewDigestCache(8) // few entries: keys keep replacing each other
	var nilCache *sharedstate.DigestCache
	keys := [][]byte{{}, []byte("a"), bytes.Repeat([]byte("x"), 129), bytes.Repeat([]byte("y"), 128)}
	for i := range 200 {
		keys = append(keys, fmt.Appendf(nil, "%d:192.0.2.%d", i%7, i))
	}
	for round := range 3 {
		for i, k := range keys {
			want := sharedstate.Digest(k)
			require.Equal(t, want, c.Digest(k), "round %d key %d", round, i)
			require.Equal(t, want, c.Digest(k), "round %d key %d again", round, i)
			require.Equal(t, want, nilCache.Digest(k))
		}
	}
	// The cache keeps its own copy of a key: a caller reusing its buffer changes nothing.
	buf := []byte("client-1")
	d1 := c.Digest(buf)
	copy(buf, "client-2")
	require.Equal(t, sharedstate.Digest([]byte("client-2")), c.Digest(buf))
	require.Equal(t, d1, c.Digest([]byte("client-1")))
}

func BenchmarkDigest(b *testing.B) {
	key := []byte("12:192.0.2.1:55554:acme")
	b.Run("sha256", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = sharedstate.Digest(key)
		}
	})
	b.Run("cache-hit", func(b *testing.B) {
		c := sharedstate.NewDigestCache(1024)
		other := []byte("12:192.0.2.2:55554:acme")
		b.ReportAllocs()
		for b.Loop() {
			// Alternating keys, so that each lookup hashes the key (rules sharing one key
			// look it up back to back, which is cheaper still).
			_ = c.Digest(key)
			_ = c.Digest(other)
		}
	})
	b.Run("cache-miss", func(b *testing.B) {
		c := sharedstate.NewDigestCache(1024)
		keys := make([][]byte, 4096)
		for i := range keys {
			keys[i] = fmt.Appendf(nil, "12:10.0.%d.%d:55554:acme", i/256, i%256)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_ = c.Digest(keys[i%len(keys)])
		}
	})
}
