package filter

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// fillHeld fills rule y's lease map of VM 0 with maxHeld unexpired leases of other keys, as a
// flood of distinct keys within one ttl leaves it.
func fillHeld(l *leaseVMs) *leaseState {
	y := l.vms[0].rules[1].lease
	for i := len(y.held); i < maxHeld; i++ {
		y.held[fmt.Sprint("flood", i)] = &heldLease{units: 1, expires: l.now + int64(time.Hour)}
	}
	return y
}

// TestLeaseMapFullDecidesExactly: when a VM's lease map for y is full of unexpired leases (a
// flood of distinct keys, which a client controls when the key is a header), a key the map
// does not hold is decided exactly, as maxHeld promises: its request debits its own cost in
// Redis, not a batch the VM could not hold. Otherwise every request of every key not held
// would debit a whole batch (ten units) and spend one, and a flood of keys would make the
// other clients' keys run out ten times faster than their traffic.
func TestLeaseMapFullDecidesExactly(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 0), 1, 1)
			y := fillHeld(l)
			for i := range 3 {
				ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", fmt.Sprint("A", i)), hdr("x-y", "late"))
				require.True(t, ok)
				require.Equal(t, tokens(999-int64(i)), yTokens(t, srv, "late"), "request %d debits its own unit only", i)
			}
			require.Len(t, y.held, maxHeld, "the map stays bounded")
		})
	}
}

// TestLateBatchMapFullIsDropped: a reset request's batch is committed when the VM's lease map
// for y has filled up meanwhile; it cannot be held, so all ten units are counted as dropped
// (they were debited), and the map stays bounded.
func TestLateBatchMapFullIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 0), 1, 1)
			id, calls := l.startReset(t, 0, hdr("x-k", "A"), hdr("x-y", "late"))
			y := fillHeld(l)
			for _, c := range calls {
				l.answerAt(t, srv.WebdisURL(), c)
			}
			l.host.CompleteHttpContext(id)
			require.Equal(t, tokens(990), yTokens(t, srv, "late"), "Redis committed the batch")
			require.Len(t, y.held, maxHeld, "the map stays bounded")
			dropped, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
			require.NoError(t, err)
			require.EqualValues(t, 10, dropped, "the batch no lease can hold is dropped, all of it")
		})
	}
}

// TestLocalLeaseMapFullDecidesExactly is TestLeaseMapFullDecidesExactly for a local rule (limit
// 20, batch 10): with the VM's lease map full of other keys' unexpired leases, the rule's key
// is decided exactly and admits its whole limit, 20 requests; with a batch debited per request
// and nine units lost each time, it would admit two.
func TestLocalLeaseMapFullDecidesExactly(t *testing.T) {
	l := newLeaseVMs(t, `{"rules":[{"name":"hot","algorithm":"fixed_window","limit":20,"window":"1h","lease":{"batch":10,"ttl":"1m"}}]}`, 1)
	hot := l.vms[0].rules[0].lease
	for i := range maxHeld {
		hot.held[fmt.Sprint("flood", i)] = &heldLease{units: 1, expires: l.now + int64(time.Hour)}
	}
	admitted := 0
	for range 25 {
		if l.do(0) {
			admitted++
		}
	}
	require.Equal(t, 20, admitted, "exactly the limit")
	require.Len(t, hot.held, maxHeld, "the map stays bounded")
}

// TestLeaseNewKeyCostBoundedWhenMapFull: a VM whose lease map is full of unexpired leases
// decides a new key exactly, and must not pay for the map's size to find that out: the
// expired leases are found from the oldest take on (leaseState.expire), not by sweeping the
// map on every new key. Measured side by side: recording exact takes of new keys with the map
// full costs at most a few times what it costs with a nearly empty map (where each new key is
// remembered, which is no cheaper).
func TestLeaseNewKeyCostBoundedWhenMapFull(t *testing.T) {
	d := algorithms.Decision{Allowed: true, Limit: 100, Remaining: 50}
	keys := make([][]byte, 2000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("new-client-", i))
	}
	measure := func(fill int) time.Duration {
		l := &leaseState{batch: 10, ttl: int64(time.Hour), held: map[string]*heldLease{}}
		for i := range fill {
			l.taken([]byte(fmt.Sprint("held-", i)), 0, 1, 1, d)
		}
		start := time.Now()
		for _, k := range keys {
			l.taken(k, 1, 1, 1, d)
		}
		return time.Since(start)
	}
	ratio := math.Inf(1)
	for range 3 {
		small, full := measure(16), measure(maxHeld)
		ratio = min(ratio, float64(full)/float64(small))
	}
	t.Logf("new keys cost %.2fx with a full lease map", ratio)
	require.Less(t, ratio, 4.0, "new keys cost %.1fx with a full lease map", ratio)
}
