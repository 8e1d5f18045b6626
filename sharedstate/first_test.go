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
