package sharedstate

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"sync/atomic"
)

// Digest returns the digest a key is stored under.
func Digest(key []byte) [DigestSize]byte {
	sum := sha256.Sum256(key)
	var d [DigestSize]byte
	copy(d[:], sum[:DigestSize])
	return d
}

// DigestCache remembers the digests of recently seen keys.
//
// SHA-256 of a short key costs about 2 us in a Wasm VM (its 64 rounds are plain 32-bit
// arithmetic that no runtime speeds up), which is the largest single cost of deciding a rule.
// Keys repeat: a client sends many requests, and rules that count the same descriptor (say one
// limit per second and one per hour for each client) share it. The cache keeps the digest, so
// it stays exactly the SHA-256 prefix that every worker VM and every older version of the
// filter computes for the same key, and nothing about collision resistance changes. The digest
// is what a slot stores to recognise its key; which slots a key may use is decided by a keyed
// hash of the digest (SipHash-2-4 under a per-process secret, see Table), about 12 ns natively,
// so clients cannot predict slots although they can compute digests. Redis keys do not use
// either: sharedstate/redis hashes long Redis keys with plain SHA-256 of its own, so that
// every proxy agrees on them.
//
// The cache is direct-mapped: an entry is chosen by SipHash-2-4 of the key under a secret of
// the cache's own (drawn like LoadSecret's), and holds one key with its digest. SipHash is the
// keyed hash the Table already computes, so a VM's first request compiles one hash function
// for both, where a seeded hash/maphash would be a third (with the runtime's memhash) beside
// SHA-256 and SipHash, about 1 KB more for V8 to compile. In a Wasm VM it costs what maphash
// does (natively, where maphash is the runtime's AES hash, about 10 ns more). The
// secret keeps clients from choosing keys that share an entry; a different key mapping to the
// same entry replaces it. Lookups compare the whole key, so a hit always returns the key's own
// digest; an attacker who floods distinct keys only turns hits into misses, which cost what
// every lookup cost before plus a copy of the key. Keys longer than maxCachedKey are not
// cached, which bounds memory at about entries * (maxCachedKey + 48) bytes; entries reuse
// their key buffers, so the cache stops allocating once warm.
//
// A DigestCache is not safe for concurrent use: share it only among the Tables of one VM (a
// VM is single-threaded).
type DigestCache struct {
	// k0, k1 is the SipHash-2-4 key that chooses a key's entry.
	k0, k1  uint64
	entries []digestEntry
	// last is the entry found or filled last. Rules that share a key look it up one after
	// another, and comparing with it first saves hashing the key again.
	last *digestEntry
}

type digestEntry struct {
	used   bool
	digest [DigestSize]byte
	key    []byte
	// h is SipHash-2-4 of digest under the key (hk0, hk1), once hashed is set. Rules that
	// share a key decide it one after another, each in its own Table; their Tables share the
	// process's secret, so the first one's hash serves the others, and the same client's next
	// request too. The key the hash was made under is kept with it, so a Table under another
	// secret computes its own rather than take a wrong one.
	hashed   bool
	hk0, hk1 uint64
	h        uint64
}

// maxCachedKey is the longest key a DigestCache keeps. Descriptors built from an address and a
// header or two are far shorter; a longer key is only hashed.
const maxCachedKey = 128

// NewDigestCache returns a cache of size entries (at least 1).
//
// The process's first cache of at most StaticDigestEntries entries takes its entries from
// static memory (staticDigest) instead of the Go heap; any later one allocates them.
func NewDigestCache(size int) *DigestCache {
	size = max(size, 1)
	var entries []digestEntry
	if size <= len(staticDigest) && staticDigestTaken.CompareAndSwap(false, true) {
		entries = staticDigest[:size]
	} else {
		entries = make([]digestEntry, size)
	}
	return &DigestCache{k0: rand.Uint64(), k1: rand.Uint64(), entries: entries}
}

// StaticDigestEntries is the size of the static entries the process's first DigestCache
// takes (1024 entries, 80 KB). The filter sizes its cache with it, so that the two cannot
// drift apart: a filter cache larger than the static entries would allocate its entries on
// the heap, silently, in every VM's configure (see staticDigest).
const StaticDigestEntries = 1024

// staticDigest holds the entries of the process's first DigestCache (a VM's first
// configuration) in the module's zeroed static data. On the Go heap, 80 KB is one large
// object (above 32 KB) that does not fit in the pages a fresh VM's heap has free, so
// allocating it would grow the heap in proxy_on_configure: the runtime's large-object path
// and the page allocator's slow path (mallocgcLarge, mcache.allocLarge, pageAlloc.find, the
// scavenger), about 17 KB of code that V8 in Envoy compiles on first use, in a VM's start-up
// (see filter/doc.go). Static, the entries cost the same memory and no allocation, and a
// plain configuration and its first requests allocate less than the heap has free
// (TestV8ValidConfigureCompilesNoColdCode, TestV8FirstRequestGrowsNoMemory).
var staticDigest [StaticDigestEntries]digestEntry

// staticDigestTaken is set once a cache has taken staticDigest: a later cache (a
// reconfiguration, another plugin of the VM, a parallel test natively) allocates its own,
// so that no two caches share entries.
var staticDigestTaken atomic.Bool

// Digest returns Digest(key), from the cache when key was seen recently. A nil cache computes
// every digest.
func (c *DigestCache) Digest(key []byte) [DigestSize]byte {
	if c == nil {
		return Digest(key)
	}
	// The SipHash of the digest under the cache's own key comes along, made once per entry.
	d, _ := c.digestHash(key, c.k0, c.k1)
	return d
}

// digestHash returns Digest(key) and SipHash-2-4 of that digest under (k0, k1), both from
// the cache when key was seen recently. A nil cache computes both every time.
//
// The lookup is written out here rather than in a function of its own, which Digest shared:
// one call fewer, and one function fewer for V8 to compile on a VM's first request.
func (c *DigestCache) digestHash(key []byte, k0, k1 uint64) (d [DigestSize]byte, h uint64) {
	if c == nil || len(key) > maxCachedKey {
		return digestHashUncached(key, k0, k1)
	}
	// The entry found or filled last first; then key's entry, filled (and its hash
	// forgotten) when it holds another key.
	e := c.last
	if e == nil || !bytes.Equal(e.key, key) {
		e = &c.entries[sipHash24(c.k0, c.k1, key)%uint64(len(c.entries))]
		c.last = e
		if !e.used || !bytes.Equal(e.key, key) {
			e.used, e.digest, e.key, e.hashed = true, Digest(key), append(e.key[:0], key...), false
		}
	}
	if !e.hashed || e.hk0 != k0 || e.hk1 != k1 {
		e.h, e.hk0, e.hk1, e.hashed = sipHash24(k0, k1, e.digest[:]), k0, k1, true
	}
	return e.digest, e.h
}

// digestHashUncached returns Digest(key) and SipHash-2-4 of it under (k0, k1), computed. It is out
// of line: the filter's tables share a cache, and keys longer than maxCachedKey are rare, so
// a first request does not compile it.
func digestHashUncached(key []byte, k0, k1 uint64) (d [DigestSize]byte, h uint64) {
	d = Digest(key)
	return d, sipHash24(k0, k1, d[:])
}
