package sharedstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// countHookStore runs hook once, at the first read of a counter of created slots: between a
// lookup's first scan of the key's slots and its second (see scanWith).
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

// A full table's second scan of the key's slots decides on what it reads, not on what the
// first scan read: scanWith fills the caller's scan in place and must clear it before each
// scan. Here the first scan finds another worker's claim of the key and no room (the table is
// full), so the slots are read again after the count; in between, the claimant releases its
// claim (it lost). The second scan sees a released slot, free for the key, and takes it. A
// claim remembered from the first scan would instead be adopted with its old CAS number: the
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

// claimHookStore runs hook once, right after the first claim written (see create), and then
// fails the next read when failRead is set.
type claimHookStore struct {
	*Memory
	hook     func()
	failRead bool
	claimed  bool // a claim was written
}

var errClaimReadFailed = errors.New("the store failed a read")

func (s *claimHookStore) Set(key string, value []byte, cas uint32) error {
	err := s.Memory.Set(key, value, cas)
	if err == nil && s.hook != nil && len(value) == claimSize && value[DigestSize] == slotClaim {
		h := s.hook
		s.hook, s.claimed = nil, true
		h()
	}
	return err
}

func (s *claimHookStore) Get(key string) ([]byte, uint32, error) {
	if s.failRead && s.claimed {
		s.failRead = false
		return nil, 0, errClaimReadFailed
	}
	return s.Memory.Get(key)
}

// A slot created by a claim is counted whether or not the claim wins (see create): the slot
// exists either way, and the count bounds how many slots a rule ever creates. Both ways a
// claim can fail after it was written are tried: another worker's copy of the key turns up
// (the claim loses, and the request is decided again on that copy), and the store fails the
// read of the claim back (the request fails). The count is a plain call at the end of create,
// not a deferred one, and must still run on these paths.
func TestLostClaimStillCountsItsSlot(t *testing.T) {
	for _, c := range []struct {
		name     string
		failRead bool
		wantErr  error
	}{
		{name: "another copy wins", wantErr: nil},
		{name: "the claim's read back fails", failRead: true, wantErr: errClaimReadFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := NewMemory()
			secret, err := LoadSecret(mem)
			if err != nil {
				t.Fatal(err)
			}
			store := &claimHookStore{Memory: mem, failRead: c.failRead}
			lim := mustLimiter(t, algorithms.Config{Algorithm: "token_bucket", Limit: 5, Window: time.Minute})
			tab, err := NewTable(TableConfig{Store: store, Prefix: "rl|c|", Slots: 10, Attempts: 8, Limiter: lim, Secret: secret})
			if err != nil {
				t.Fatal(err)
			}
			key := []byte("client-a")
			digest, h := (*DigestCache)(nil).digestHash(key, tab.k0, tab.k1)
			b, start := tab.cur.choices(h)
			// Another worker's live copy, in the slot after the one the claim takes (the
			// first of the emptier bucket from its starting slot: both are empty).
			other := tab.name(10, b[0]*BucketSlots+(start[0]+1)%BucketSlots)
			store.hook = func() {
				if c.failRead {
					return
				}
				live := append(digest[:], slotLive)
				if err := mem.Set(other, live, createCAS); err != nil {
					t.Fatal(err)
				}
			}
			var p Pending
			err = tab.AllowN(key, int64(time.Hour), 1, &p)
			if err != c.wantErr {
				t.Fatalf("AllowN: %v, want %v", err, c.wantErr)
			}
			if store.hook != nil {
				t.Fatal("no claim was written: the test set nothing up")
			}
			if !p.Claimed || p.Used != 1 || tab.Used() != 1 {
				t.Fatalf("claimed %v, used %d, table's count %d: want the created slot counted once", p.Claimed, p.Used, tab.Used())
			}
		})
	}
}

// Of two fresh claims of one key, the one first in the order lookups read the slots wins (see
// create): a claimant that finds such a claim before its own gives way, releases its own
// claim and decides again, adopting the winner. The scan of create's step 2 tells verifyCopy
// whether a slot comes before the claim; were that lost, each claimant would release the
// other's claim and both conversions could fail. Here the key's emptier bucket is its first,
// whose starting slot is taken, so the key is placed at the bucket's next slot, after the
// second bucket's starting slot in read order; right after the claim, another worker claims
// that free starting slot. TestLaterClaimGivesWay is the other order.
func TestEarlierClaimWins(t *testing.T) {
	c := newClaimRace(t, "rl|e|")
	mem, lim, tab, b, start := c.mem, c.lim, c.tab, c.b, c.start
	const now = int64(time.Hour)
	slot := func(bk, j uint32) uint32 { return b[bk]*BucketSlots + (start[bk]+j)%BucketSlots }
	_, active := lim.AllowN(nil, now, 1)
	for i, idx := range []uint32{slot(0, 0), slot(1, 1), slot(1, 2)} {
		d := Digest(fmt.Appendf(nil, "other-%d", i))
		v := append(append(d[:], slotLive), active...)
		if err := mem.Set(tab.name(100, idx), v, 0); err != nil {
			t.Fatal(err)
		}
	}
	ours, theirs := tab.name(100, slot(0, 1)), tab.name(100, slot(1, 0))
	p := c.decideWithClaimAt(t, theirs, now)
	if k := c.kind(t, ours); k != slotReleased {
		t.Fatalf("the later claim's slot %s is of kind %d, want released", ours, k)
	}
	if k := c.kind(t, theirs); k != slotLive {
		t.Fatalf("the earlier claim's slot %s is of kind %d, want live (adopted)", theirs, k)
	}
	if p.Retries != 1 {
		t.Fatalf("retries %d, want 1: the later claim gives way once", p.Retries)
	}
}

// A claim that comes after this request's own in the order lookups read the slots gives way:
// the request releases it and converts its own claim, deciding once (TestEarlierClaimWins is
// the other order). In an empty table the key goes to the starting slot of its first bucket,
// the first slot a lookup reads; right after its claim, another worker claims the starting
// slot of the second bucket, the second slot read. Were create's step 2 to take every other
// claim for an earlier one, this request would give way to that claim instead and decide
// again, adopting it: no key counted twice, but the order of the protocol lost.
func TestLaterClaimGivesWay(t *testing.T) {
	c := newClaimRace(t, "rl|l|")
	tab, b, start := c.tab, c.b, c.start
	const now = int64(time.Hour)
	ours, theirs := tab.name(100, b[0]*BucketSlots+start[0]), tab.name(100, b[1]*BucketSlots+start[1])
	p := c.decideWithClaimAt(t, theirs, now)
	if k := c.kind(t, ours); k != slotLive {
		t.Fatalf("the earlier claim's slot %s is of kind %d, want live", ours, k)
	}
	if k := c.kind(t, theirs); k != slotReleased {
		t.Fatalf("the later claim's slot %s is of kind %d, want released", theirs, k)
	}
	if p.Retries != 0 {
		t.Fatalf("retries %d, want 0: the earlier claim does not give way", p.Retries)
	}
}

// claimRace is the set-up of the tests of two fresh claims of one key (TestEarlierClaimWins,
// TestLaterClaimGivesWay): an empty table of 100 slots whose store lets a test write another
// worker's claim right after the request's own, and a key whose two buckets differ.
type claimRace struct {
	mem      *Memory
	store    *claimHookStore
	lim      Limiter
	tab      *Table
	key      []byte
	digest   [DigestSize]byte
	b, start [Choices]uint32
}

// newClaimRace makes a claimRace whose table's names begin with prefix.
func newClaimRace(t *testing.T, prefix string) *claimRace {
	t.Helper()
	c := &claimRace{mem: NewMemory()}
	secret, err := LoadSecret(c.mem)
	if err != nil {
		t.Fatal(err)
	}
	c.store = &claimHookStore{Memory: c.mem}
	c.lim = mustLimiter(t, algorithms.Config{Algorithm: "token_bucket", Limit: 5, Window: time.Minute})
	c.tab, err = NewTable(TableConfig{Store: c.store, Prefix: prefix, Slots: 100, Attempts: 8, Limiter: c.lim, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		c.key = fmt.Appendf(nil, "client-%d", i)
		var h uint64
		c.digest, h = (*DigestCache)(nil).digestHash(c.key, c.tab.k0, c.tab.k1)
		if c.b, c.start = c.tab.cur.choices(h); c.b[0] != c.b[1] {
			return c
		}
	}
}

// decideWithClaimAt decides one request for the key at now, with another worker's fresh claim
// of the key written into slot theirs right after the request's own claim, and fails the test
// unless the request is admitted and the other claim was written.
func (c *claimRace) decideWithClaimAt(t *testing.T, theirs string, now int64) Pending {
	t.Helper()
	c.store.hook = func() {
		claim := append(c.digest[:], slotClaim)
		claim = binary.LittleEndian.AppendUint64(claim, uint64(now))
		claim = binary.LittleEndian.AppendUint64(claim, c.tab.id+1)
		if err := c.mem.Set(theirs, claim, createCAS); err != nil {
			t.Fatal(err)
		}
	}
	var p Pending
	if err := c.tab.AllowN(c.key, now, 1, &p); err != nil || !p.Decision.Allowed {
		t.Fatalf("AllowN: %v, %+v", err, p.Decision)
	}
	if c.store.hook != nil {
		t.Fatal("no claim was written: the test set nothing up")
	}
	return p
}

// kind returns the kind of the key's slot called name, failing the test if it holds another key.
func (c *claimRace) kind(t *testing.T, name string) byte {
	t.Helper()
	v, _, err := c.mem.Get(name)
	if err != nil || len(v) < slotHeader || [DigestSize]byte(v[:DigestSize]) != c.digest {
		t.Fatalf("slot %s = %x, %v: not the key's", name, v, err)
	}
	return v[DigestSize]
}
