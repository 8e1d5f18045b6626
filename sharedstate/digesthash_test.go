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
