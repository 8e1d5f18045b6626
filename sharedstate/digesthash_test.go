package sharedstate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The cached hash of a key's digest is always SipHash-2-4 of that key's digest under the
// secret asked for: after the entry was taken by another key (a one-entry cache replaces it
// on every miss), under another Table's secret, for a key too long to cache, and without a
// cache.
func TestDigestHashIsTheKeysSipHash(t *testing.T) {
	secrets := [][2]uint64{{1, 2}, {3, 4}, {1, 5}}
	keys := [][]byte{[]byte("3:abc"), []byte("3:abd"), []byte(""), []byte(strings.Repeat("k", maxCachedKey+1))}
	var nilCache *DigestCache
	for _, c := range []*DigestCache{NewDigestCache(1), NewDigestCache(64), nilCache} {
		for round := range 3 {
			// Keys inner: under one secret, each key takes the one-entry cache's entry from
			// the key before it.
			for _, s := range secrets {
				for _, k := range keys {
					d, h := c.digestHash(k, s[0], s[1])
					want := Digest(k)
					require.Equal(t, want, d, "round %d key %q", round, k)
					require.Equal(t, sipHash24(s[0], s[1], want[:]), h, "round %d key %q secret %v", round, k, s)
					// The same key under the same secret again, as a second rule sharing the
					// key asks for it.
					d2, h2 := c.digestHash(k, s[0], s[1])
					require.Equal(t, d, d2)
					require.Equal(t, h, h2)
				}
			}
		}
	}
}

// Rules that share a key compute its hash once: the second lookup of a key under the same
// secret allocates nothing and returns the cached hash, which a changed entry would show.
func TestDigestHashIsCachedPerKey(t *testing.T) {
	c := NewDigestCache(8)
	k := []byte("12:192.0.2.1:51:-")
	d, h := c.digestHash(k, 7, 9)
	e := c.last
	require.NotNil(t, e)
	require.True(t, e.hashed)
	e.h = h ^ 1 // what a second computation would not return
	_, h2 := c.digestHash(k, 7, 9)
	require.Equal(t, h^1, h2, "the hash was computed again")
	require.Equal(t, d, c.Digest(k))
	require.Zero(t, testing.AllocsPerRun(100, func() { c.digestHash(k, 7, 9) }))
	for i := range 100 { // the entry is taken by other keys and refilled
		c.digestHash(fmt.Appendf(nil, "other %d", i), 7, 9)
	}
	_, h3 := c.digestHash(k, 7, 9)
	require.Equal(t, h, h3)
}

// A DigestCache chooses a key's entry by SipHash-2-4 under a key of its own, drawn for each
// cache: not a fixed key (which would let clients compute keys that share an entry and evict
// each other's digests) and not the Table's secret. Digest, which goes through digestHash under
// the cache's key, leaves an entry whose hash a Table's lookup under its own secret does not
// take for its own.
func TestDigestCacheIndexIsKeyedPerCache(t *testing.T) {
	key := []byte("12:192.0.2.1:51:-")
	entries := map[uint64]bool{}
	seen := map[[2]uint64]bool{}
	for range 64 {
		c := NewDigestCache(StaticDigestEntries)
		require.False(t, c.k0 == 0 && c.k1 == 0, "the cache's index key is zero")
		require.False(t, seen[[2]uint64{c.k0, c.k1}], "two caches drew the same index key")
		seen[[2]uint64{c.k0, c.k1}] = true
		want := Digest(key)
		require.Equal(t, want, c.Digest(key))
		i := sipHash24(c.k0, c.k1, key) % uint64(len(c.entries))
		require.Same(t, &c.entries[i], c.last, "the key's entry is not the one its keyed hash chooses")
		require.Equal(t, want, c.entries[i].digest)
		entries[i] = true
		// A Table's lookup after Digest: the hash is under the Table's secret, not the cache's.
		d, h := c.digestHash(key, 7, 9)
		require.Equal(t, want, d)
		require.Equal(t, sipHash24(7, 9, want[:]), h)
		require.Equal(t, want, c.Digest(key))
		_, h = c.digestHash(key, 7, 9)
		require.Equal(t, sipHash24(7, 9, want[:]), h)
	}
	// With a fixed key every cache would put the key in one entry; 64 random keys over 1024
	// entries put it in one entry with probability 1024^-63.
	require.Greater(t, len(entries), 1, "every cache put the key in the same entry")
}
