package sharedstate

import (
	"encoding/binary"
	"strings"
	"testing"
)

// layoutOf returns where key may live in a table of maxKeys under secret: its geometry, its two
// groups, its home slot in the first, and its digest.
func layoutOf(secret [SecretSize]byte, maxKeys uint32, key string) (g geometry, b [Choices]uint32, home uint32, d [DigestSize]byte) {
	g = newGeometry(maxKeys)
	k0, k1 := binary.LittleEndian.Uint64(secret[:8]), binary.LittleEndian.Uint64(secret[8:])
	d, h := keyDigest(k0, k1, []byte(key))
	b, home = g.choices(h)
	return g, b, home, d
}

// digestUnder returns key's digest in a table under secret.
func digestUnder(secret [SecretSize]byte, key string) [DigestSize]byte {
	_, _, _, d := layoutOf(secret, 1, key)
	return d
}

// putEntry writes digest d as the owner of slot pos of group b in geometry g's index (other
// entries kept), and v (when not nil) in that slot, as a table that placed the key there would.
func putEntry(t testing.TB, store Store, prefix string, g geometry, b, pos uint32, d [DigestSize]byte, v []byte) {
	t.Helper()
	tab := &Table{prefix: prefix}
	name := strings.Clone(tab.indexName(g.maxKeys, b))
	ix, _, err := store.Get(name)
	if err != nil || len(ix) != int(g.size(b))*fingerprintSize {
		ix = make([]byte, g.size(b)*fingerprintSize)
	}
	binary.LittleEndian.PutUint64(ix[pos*fingerprintSize:], fingerprint(&d))
	if err := store.Set(name, ix, 0); err != nil {
		t.Fatal(err)
	}
	if v != nil {
		if err := store.Set(string(appendName(nil, prefix, g.maxKeys, '.', b*GroupSlots+pos)), v, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// liveValue is the slot value of the key of digest d with state.
func liveValue(d [DigestSize]byte, state []byte) []byte {
	return append(append(d[:], slotLive), state...)
}

// putOther places key other, with state, in slot j (from key's home) of key's first group in
// geometry maxKeys: a neighbour of key.
func putOther(t testing.TB, store Store, secret [SecretSize]byte, prefix string, maxKeys uint32, key, other string, j uint32, state []byte) {
	t.Helper()
	g, b, home, _ := layoutOf(secret, maxKeys, key)
	d := digestUnder(secret, other)
	putEntry(t, store, prefix, g, b[0], (home+j)%g.size(b[0]), d, liveValue(d, state))
}
