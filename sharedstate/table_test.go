package sharedstate_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/stretchr/testify/require"
)

const sec = int64(time.Second)

func newTable(t testing.TB, store sharedstate.Store, slots uint32, c algorithms.Config) *sharedstate.Table {
	t.Helper()
	lim, err := algorithms.New(c)
	require.NoError(t, err)
	secret, err := sharedstate.LoadSecret(store)
	require.NoError(t, err)
	tab, err := sharedstate.NewTable(sharedstate.TableConfig{
		Store: store, Prefix: "rl|test|", Slots: slots, Attempts: 8, Limiter: lim, Secret: secret,
	})
	require.NoError(t, err)
	return tab
}

var tokenBucket10 = algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: time.Minute}

func TestTableKeysAreIndependent(t *testing.T) {
	store := sharedstate.NewMemory()
	tab := newTable(t, store, 64, tokenBucket10)
	var p sharedstate.Pending
	for i := range 10 {
		require.NoError(t, tab.AllowN([]byte("a"), 0, 1, &p))
		require.True(t, p.Decision.Allowed, "request %d", i)
	}
	require.NoError(t, tab.AllowN([]byte("a"), 0, 1, &p))
	require.False(t, p.Decision.Allowed)
	require.NoError(t, tab.AllowN([]byte("b"), 0, 1, &p))
	require.True(t, p.Decision.Allowed)
	require.EqualValues(t, 9, p.Decision.Remaining)
}

func TestDecideWritesNothing(t *testing.T) {
	store := sharedstate.NewMemory()
	tab := newTable(t, store, 8, tokenBucket10)
	before := store.Len() // the secret and the table's geometry record
	var p sharedstate.Pending
	for range 20 {
		require.NoError(t, tab.Decide([]byte("a"), 0, 1, &p))
		require.True(t, p.Decision.Allowed)
	}
	require.Equal(t, before, store.Len())
}

// Exactness under concurrency: many goroutines (standing in for worker VMs) on one hot key of
// a bucket of N admit exactly N, with the bounded retries absorbing the contention.
func TestTableExactUnderConcurrency(t *testing.T) {
	store := sharedstate.NewMemory()
	const n = 500
	var admitted, exhausted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		// One Table per goroutine, as one per worker VM, all on one store.
		tab := newTable(t, store, 16, algorithms.Config{Algorithm: "token_bucket", Limit: n, Window: time.Hour})
		wg.Add(1)
		go func() {
			defer wg.Done()
			var p sharedstate.Pending
			for range 200 {
				for {
					err := tab.AllowN([]byte("hot"), 0, 1, &p)
					if errors.Is(err, sharedstate.ErrAttemptsExhausted) {
						exhausted.Add(1)
						continue // the filter applies failure_mode; the test retries
					}
					require.NoError(t, err)
					break
				}
				if p.Decision.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, n, admitted.Load(), "exhausted attempts: %d", exhausted.Load())
}

// The table never creates more than max_keys slots, however many distinct keys arrive, and
// keys that find no slot are counted in an overflow slot instead of evicting a key that has
// spent its allowance.
func TestTableIsBoundedAndNeverEvictsSpentKeys(t *testing.T) {
	store := sharedstate.NewMemory()
	tab := newTable(t, store, 8, algorithms.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Minute})
	var p sharedstate.Pending
	// Fill: 200 distinct keys, each spending one of its two requests and then, once the table
	// is full, the other (its slot is kept: it has spent everything).
	overflowed := 0
	for i := range 200 {
		require.NoError(t, tab.AllowN(fmt.Appendf(nil, "k%d", i), 0, 1, &p))
		if p.Overflow {
			overflowed++
		}
		if i == 7 {
			for j := range 8 {
				require.NoError(t, tab.AllowN(fmt.Appendf(nil, "k%d", j), 0, 1, &p))
				require.False(t, p.Overflow)
			}
		}
	}
	require.Equal(t, 8, countSlots(store, "rl|test|8."), "slots created")
	require.EqualValues(t, 8, tab.Used())
	require.LessOrEqual(t, countSlots(store, "rl|test|o."), sharedstate.OverflowSlots)
	require.Equal(t, 200-8, overflowed)
	// Every placed key is still denied: nothing was evicted or reset.
	placed := 0
	for i := range 200 {
		require.NoError(t, tab.Decide(fmt.Appendf(nil, "k%d", i), 1, 1, &p))
		if !p.Overflow {
			placed++
			require.Less(t, i, 8, "key k%d took a slot of a key that spent its allowance", i)
			require.False(t, p.Decision.Allowed, "key k%d", i)
		}
	}
	require.Equal(t, 8, placed)
}

// countSlots counts the store's entries whose name starts with prefix.
func countSlots(store *sharedstate.Memory, prefix string) int {
	n := 0
	for _, k := range store.Keys() {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// Once a key is back at its full allowance its slot can go to another key; nobody gains
// anything from that.
func TestTableReclaimsIdleSlots(t *testing.T) {
	store := sharedstate.NewMemory()
	tab := newTable(t, store, 1, algorithms.Config{Algorithm: "fixed_window", Limit: 1, Window: time.Second})
	var p sharedstate.Pending
	require.NoError(t, tab.AllowN([]byte("a"), 0, 1, &p))
	require.False(t, p.Overflow)
	require.NoError(t, tab.AllowN([]byte("b"), 0, 1, &p))
	require.True(t, p.Overflow, "a is active: b must not take its slot")
	require.NoError(t, tab.AllowN([]byte("b"), 2*sec, 1, &p))
	require.False(t, p.Overflow, "a is idle after its window: b takes the slot")
	require.True(t, p.Decision.Allowed)
}

// Corrupt bytes in a slot are treated as a fresh key, never a panic.
func TestTableSurvivesCorruptState(t *testing.T) {
	for _, junk := range [][]byte{nil, {1}, make([]byte, 15), make([]byte, 16), make([]byte, 17), []byte("0123456789abcdef\x00\xff\xff\xff"),
		[]byte("0123456789abcdef\x01\xff\xff\xff"), []byte("0123456789abcdef\x07\xff\xff\xff")} {
		store := sharedstate.NewMemory()
		tab := newTable(t, store, 1, tokenBucket10)
		require.NoError(t, store.Set("rl|test|1.0", junk, 0))
		require.NoError(t, store.Set("rl|test|1#0", junk, 0))
		var p sharedstate.Pending
		require.NoError(t, tab.AllowN([]byte("a"), 0, 1, &p))
		require.True(t, p.Decision.Allowed)
		require.EqualValues(t, 9, p.Decision.Remaining)
	}
}

// A commit that lost the race decides again on the fresh state, which may deny.
func TestCommitDecidesAgainAfterLostRace(t *testing.T) {
	store := sharedstate.NewMemory()
	tab := newTable(t, store, 4, algorithms.Config{Algorithm: "fixed_window", Limit: 1, Window: time.Minute})
	var slow, fast sharedstate.Pending
	require.NoError(t, tab.Decide([]byte("a"), 0, 1, &slow))
	require.True(t, slow.Decision.Allowed)
	require.NoError(t, tab.AllowN([]byte("a"), 0, 1, &fast))
	require.True(t, fast.Decision.Allowed)
	require.NoError(t, tab.Commit(&slow))
	require.Equal(t, 1, slow.Retries)
	require.False(t, slow.Decision.Allowed)
}

func BenchmarkTableAllowN(b *testing.B) {
	store := sharedstate.NewMemory()
	tab := newTable(b, store, 10000, algorithms.Config{Algorithm: "gcra", Limit: 1_000_000, Window: time.Second})
	var p sharedstate.Pending
	key := []byte("client-192.0.2.1")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := tab.AllowN(key, int64(i)*1000, 1, &p); err != nil || !p.Decision.Allowed {
			b.Fatal(err, p.Decision)
		}
	}
}

// Slot names are the prefix, the geometry (max_keys), a dot and the slot number; group indexes
// the prefix, the geometry, '#' and the group number; overflow slots "o." and their number;
// besides them a rule has its record of geometries, and the process its secret. Nothing else
// is ever written.
func TestSlotKeys(t *testing.T) {
	store := sharedstate.NewMemory()
	tab := newTable(t, store, 5000, algorithms.Config{Algorithm: "fixed_window", Limit: 5, Window: time.Minute})
	var p sharedstate.Pending
	for i := range 2000 {
		require.NoError(t, tab.AllowN(fmt.Appendf(nil, "k%d", i), 0, 1, &p))
		require.NoError(t, tab.AllowN(fmt.Appendf(nil, "k%d", i), 0, 1, &p)) // found again
		require.False(t, p.Overflow)
		require.EqualValues(t, 3, p.Decision.Remaining, "key k%d", i)
	}
	groups := (5000 + sharedstate.GroupSlots - 1) / sharedstate.GroupSlots
	slots := 0
	for _, k := range store.Keys() {
		switch {
		case k == sharedstate.SecretKey, k == "rl|test|geometries":
		case strings.HasPrefix(k, "rl|test|5000#"):
			n, err := strconv.Atoi(strings.TrimPrefix(k, "rl|test|5000#"))
			require.NoError(t, err, k)
			require.Less(t, n, groups)
		case strings.HasPrefix(k, "rl|test|5000."):
			n, err := strconv.Atoi(strings.TrimPrefix(k, "rl|test|5000."))
			require.NoError(t, err, k)
			require.Less(t, n, groups*sharedstate.GroupSlots)
			slots++
		default:
			t.Fatalf("unexpected key %q", k)
		}
	}
	require.Equal(t, 2000, slots)
	require.EqualValues(t, 2000, tab.Used())
}
