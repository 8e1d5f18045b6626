package sharedstate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// recordingStore records the names a Table reads.
type recordingStore struct {
	Store
	reads []string
}

func (r *recordingStore) Get(key string) ([]byte, uint32, error) {
	r.reads = append(r.reads, strings.Clone(key)) // the name may be built in a reused buffer
	return r.Store.Get(key)
}

// decide decides an established key found live in its first slot with that one read,
// and when it does not decide, the full lookup takes its read as its own first: no Decide reads
// a slot twice, for new keys, for keys in their first slot and for keys elsewhere in their
// buckets (both cases occur here, or the test would prove nothing).
func TestDecideReadsEachSlotOnce(t *testing.T) {
	rec := &recordingStore{Store: NewMemory()}
	tab := mustTable(t, rec, 1000, mustLimiter(t, algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: time.Minute}))
	noTwice := func(key string) {
		t.Helper()
		seen := map[string]bool{}
		for _, n := range rec.reads {
			if seen[n] {
				t.Fatalf("key %s: slot %s read twice in one Decide: %v", key, n, rec.reads)
			}
			seen[n] = true
		}
	}
	var p Pending
	for k := range 600 {
		key := fmt.Sprintf("k%d", k)
		rec.reads = rec.reads[:0]
		if err := tab.Decide([]byte(key), 0, 1, &p); err != nil {
			t.Fatal(err)
		}
		noTwice(key)
		if err := tab.Commit(&p); err != nil {
			t.Fatal(err)
		}
	}
	fast, slow := 0, 0
	for k := range 600 {
		key := fmt.Sprintf("k%d", k)
		rec.reads = rec.reads[:0]
		if err := tab.Decide([]byte(key), 0, 1, &p); err != nil {
			t.Fatal(err)
		}
		if !p.Decision.Allowed || p.Decision.Remaining != 8 {
			t.Fatalf("key %s: the second request was decided on the wrong state: %+v", key, p.Decision)
		}
		noTwice(key)
		if len(rec.reads) == 1 {
			fast++
		} else {
			slow++
		}
	}
	t.Logf("%d keys decided on their first slot's read, %d by the full lookup", fast, slow)
	if fast == 0 || slow == 0 {
		t.Fatalf("fast %d, slow %d: both paths must be taken", fast, slow)
	}
}

// A new key costs at most 4 shared-data reads and 2 writes, from an empty table to a full one
// and past it, where new keys take the slots of keys that spent less (a key decided in an
// overflow slot reads one slot more: it is counted apart, and must stay rare). 12,000
// one-request keys arrive on a 10,000-key table.
func TestNewKeyReadsAndWrites(t *testing.T) {
	const maxKeys = 10000
	store := &countingStore{Store: NewMemory()}
	tab := mustTable(t, store, maxKeys, mustLimiter(t, algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: time.Hour}))
	var p Pending
	maxReads, maxWrites, overflowed, reads := 0, 0, 0, 0
	for i := range maxKeys * 6 / 5 {
		store.reads, store.writes = 0, 0
		if err := tab.AllowN(fmt.Appendf(nil, "key-%d", i), 0, 1, &p); err != nil {
			t.Fatal(err)
		}
		if p.Overflow {
			overflowed++
			continue
		}
		reads += store.reads
		maxReads, maxWrites = max(maxReads, store.reads), max(maxWrites, store.writes)
	}
	t.Logf("new keys: at most %d reads and %d writes, %.2f reads on average; %d decided in overflow slots",
		maxReads, maxWrites, float64(reads)/float64(maxKeys*6/5-overflowed), overflowed)
	if maxReads > 4 || maxWrites > 2 {
		t.Errorf("a new key made %d reads and %d writes, want at most 4 and 2", maxReads, maxWrites)
	}
	if overflowed > maxKeys/100 {
		t.Errorf("%d of %d new keys decided in overflow slots", overflowed, maxKeys*6/5)
	}
}
