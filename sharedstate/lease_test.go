package sharedstate

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// remaining returns what key has left at now, with a decision for 0 events (nothing written).
func remaining(t *testing.T, tab *Table, key string, now int64) int64 {
	t.Helper()
	var p Pending
	if err := tab.Decide([]byte(key), now, 1, &p); err != nil {
		t.Fatal(err)
	}
	return p.Decision.Remaining + 1
}

// TestTakeReservesAShareOfWhatRemains: a take reserves at most 1/share of what the key has
// left after the request's cost, and no more than asked; a take whose reserve does not fit is
// the exact decision for the cost; GiveBack returns unspent units to the key's state.
func TestTakeReservesAShareOfWhatRemains(t *testing.T) {
	lim := mustLimiter(t, algorithms.Config{Algorithm: "fixed_window", Limit: 100, Window: time.Hour})
	tab := mustTable(t, NewMemory(), 16, lim)
	now := int64(1_764_480_000) * int64(time.Second)
	cases := []struct {
		cost, reserve, wantReserved, wantLeft int64
	}{
		{1, 99, 99 / 8, 100 - 1 - 12},      // 99 left after the cost: 12 reserved
		{1, 3, 3, 87 - 1 - 3},              // no more than asked
		{2, 50, (83 - 2) / 8, 83 - 2 - 10}, // 81 left after the cost: 10
		{1, 0, 0, 71 - 1},                  // no reserve: the exact decision
	}
	for i, c := range cases {
		var p Pending
		if err := tab.Take([]byte("k"), now, c.cost, c.reserve, &p); err != nil {
			t.Fatal(err)
		}
		if err := tab.Commit(&p); err != nil {
			t.Fatal(err)
		}
		if !p.Decision.Allowed || p.Reserved != c.wantReserved {
			t.Errorf("case %d: %+v reserved %d, want %d", i, p.Decision, p.Reserved, c.wantReserved)
		}
		if got := remaining(t, tab, "k", now); got != c.wantLeft {
			t.Errorf("case %d: %d left, want %d", i, got, c.wantLeft)
		}
	}
	// Spend down to 3 left: a take then reserves nothing (3/8), and the cost alone is decided.
	var p Pending
	if err := tab.AllowN([]byte("k"), now, 67, &p); err != nil || !p.Decision.Allowed {
		t.Fatal(err, p.Decision)
	}
	if err := tab.Take([]byte("k"), now, 3, 50, &p); err != nil || !p.Decision.Allowed || p.Reserved != 0 {
		t.Fatalf("%v %+v reserved %d", err, p.Decision, p.Reserved)
	}
	if err := tab.Take([]byte("k"), now, 4, 50, &p); err != nil || p.Decision.Allowed {
		t.Fatalf("a take of 4 with 3 left: %v %+v", err, p.Decision)
	}
	// GiveBack: 10 units back into the window they were taken in.
	if err := tab.GiveBack([]byte("k"), now, now, 10, &p); err != nil || !p.Decision.Allowed {
		t.Fatalf("%v %+v", err, p.Decision)
	}
	if got := remaining(t, tab, "k", now); got != 13 {
		t.Errorf("%d left after a give-back of 10, want 13", got)
	}
	// A key with no state takes nothing back, and is not placed in the table.
	used := tab.Used()
	if err := tab.GiveBack([]byte("absent"), now, now, 10, &p); err != nil || p.Decision.Allowed {
		t.Fatalf("%v %+v", err, p.Decision)
	}
	if tab.Used() != used {
		t.Error("a give-back placed a key")
	}
}

// TestTakeReservesNothingInAnOverflowSlot: a key that finds no slot of its own is counted in
// an overflow slot shared with other keys: a take there is the exact decision for its cost,
// and nothing is given back there.
func TestTakeReservesNothingInAnOverflowSlot(t *testing.T) {
	lim := mustLimiter(t, algorithms.Config{Algorithm: "fixed_window", Limit: 100, Window: time.Hour})
	tab := mustTable(t, NewMemory(), 1, lim)
	now := int64(1_764_480_000) * int64(time.Second)
	var p Pending
	// The table's one slot holds a key that has spent its whole allowance: it is never
	// evicted, and every other key is counted in an overflow slot.
	if err := tab.AllowN([]byte("spent"), now, 100, &p); err != nil || !p.Decision.Allowed {
		t.Fatal(err, p.Decision)
	}
	overflowed := 0
	for i := range 20 {
		key := []byte(fmt.Sprint("client", i))
		if err := tab.Take(key, now, 1, 10, &p); err != nil {
			t.Fatal(err)
		}
		if p.Overflow {
			overflowed++
			if p.Reserved != 0 {
				t.Fatalf("%s reserved %d in an overflow slot", key, p.Reserved)
			}
		}
		if err := tab.Commit(&p); err != nil {
			t.Fatal(err)
		}
		var g Pending
		if err := tab.GiveBack(key, now, now, 1, &g); err != nil {
			t.Fatal(err)
		}
		if g.Overflow && g.Decision.Allowed {
			t.Fatalf("%s gave units back to an overflow slot", key)
		}
	}
	if overflowed == 0 {
		t.Fatal("no key overflowed")
	}
}

// TestSettleChargesTheKeyState: Settle charges a usage settlement to the key's state through
// the table, a refund and a debt, and writes nothing for a refund on a fresh key or a zero
// delta.
func TestSettleChargesTheKeyState(t *testing.T) {
	lim := mustLimiter(t, algorithms.Config{Algorithm: "token_bucket", Limit: 100, Window: time.Hour})
	tab := mustTable(t, NewMemory(), 16, lim)
	now := int64(1_764_480_000) * int64(time.Second)
	var p Pending
	if err := tab.AllowN([]byte("k"), now, 40, &p); err != nil || !p.Decision.Allowed {
		t.Fatal(err, p.Decision)
	}
	steps := []struct {
		key      string
		delta    int64
		wantLeft int64
	}{
		{"k", -10, 70},     // a refund of 10 of the 40 reserved
		{"k", 30, 40},      // a debt of 30 beyond them
		{"k", 0, 40},       // nothing to settle
		{"fresh", -5, 100}, // a refund on a key without state: nothing written
	}
	for i, s := range steps {
		if err := tab.Settle([]byte(s.key), now, now, s.delta, &p); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := remaining(t, tab, s.key, now); got != s.wantLeft {
			t.Errorf("step %d: %s has %d left, want %d", i, s.key, got, s.wantLeft)
		}
	}
	// A debt beyond the capacity on a key without state: the key owes 20 and denies a request.
	if err := tab.Settle([]byte("fresh"), now, now, 120, &p); err != nil {
		t.Fatal(err)
	}
	if err := tab.Decide([]byte("fresh"), now, 1, &p); err != nil || p.Decision.Allowed {
		t.Fatalf("after a debt of 120 on a capacity of 100: %v %+v", err, p.Decision)
	}
}
