package sharedstate

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// countHookStore runs hook once, at the first read of a counter of created slots: between a
// lookup's first pass over the key's slots and its second (see scanWith).
type countHookStore struct {
	*Memory
	hook func()
}

func (s *countHookStore) Get(key string) ([]byte, uint32, error) {
	if s.hook != nil && strings.HasSuffix(key, ".used") {
		h := s.hook
		s.hook = nil
		h()
	}
	return s.Memory.Get(key)
}

// A full table's second pass over the key's slots decides on what it reads, not on what the
// first pass read: scanWith fills the caller's scan in place and must clear it before each
// pass. Here the first pass finds another worker's claim of the key and no room (the table is
// full), so the slots are read again after the count; in between, the claimant releases its
// claim (it lost). The second pass sees a released slot, free for the key, and takes it. A
// claim remembered from the first pass would instead be adopted with its old CAS number: the
// conversion fails, and with one attempt the request is denied as contention (a false 429).
func TestSecondPassForgetsTheFirst(t *testing.T) {
	mem := NewMemory()
	secret, err := LoadSecret(mem)
	if err != nil {
		t.Fatal(err)
	}
	store := &countHookStore{Memory: mem}
	lim := mustLimiter(t, algorithms.Config{Algorithm: "token_bucket", Limit: 5, Window: time.Minute})
	// max_keys 1: one bucket of BucketSlots slots, and the key's two choices are that bucket.
	tab, err := NewTable(TableConfig{Store: store, Prefix: "rl|p|", Slots: 1, Attempts: 1, Limiter: lim, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("client-a")
	digest, h := (*DigestCache)(nil).digestHash(key, tab.k0, tab.k1)
	b, start := tab.cur.choices(h)
	if b[0] != 0 || b[1] != 0 {
		t.Fatalf("max_keys 1 has one bucket, got %v", b)
	}
	// The claim is not in the first slot read, so that the lookup's fast path reads a slot
	// that was never written.
	claimIdx := (start[0] + 3) % BucketSlots
	const now = int64(time.Hour)
	claim := append(digest[:], slotClaim)
	claim = binary.LittleEndian.AppendUint64(claim, uint64(now))
	claim = binary.LittleEndian.AppendUint64(claim, tab.id+1)
	slot := tab.name(1, claimIdx)
	if err := mem.Set(slot, claim, 0); err != nil {
		t.Fatal(err)
	}
	// The table is full: max_keys slots were created (by the claim's worker).
	if err := mem.Set(tab.usedKey(1), binary.LittleEndian.AppendUint32(nil, 1), 0); err != nil {
		t.Fatal(err)
	}
	store.hook = func() {
		if err := mem.Set(slot, append(digest[:], slotReleased), 0); err != nil {
			t.Fatal(err)
		}
	}

	var p Pending
	if err := tab.AllowN(key, now, 1, &p); err != nil {
		t.Fatalf("AllowN: %v (retries %d)", err, p.Retries)
	}
	if store.hook != nil {
		t.Fatal("the lookup never read the count of created slots: the test set nothing up")
	}
	if !p.Decision.Allowed || p.Retries != 0 || p.Overflow || p.Claimed {
		t.Fatalf("decision %+v, retries %d, overflow %v, claimed %v: want allowed at the first attempt, in the released slot",
			p.Decision, p.Retries, p.Overflow, p.Claimed)
	}
	v, _, err := mem.Get(slot)
	if err != nil || len(v) < slotHeader || [DigestSize]byte(v[:DigestSize]) != digest || v[DigestSize] != slotLive {
		t.Fatalf("slot %s = %x, %v: want the key live there", slot, v, err)
	}
}
