package moduletest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLeaseWasmMapFullDecidesExactly: the compiled module on the virtual clock, one worker, a
// local rule keyed by a header (limit 20 an hour, lease batch 10, ttl 1m). A client sends
// 4,096 distinct keys, each of which takes a batch the VM holds, so the VM's lease map for the
// rule is full (maxHeld) and none of its leases has expired. Another client's key, which the
// VM does not hold, is then decided exactly and admits its whole limit, 20 of 25 requests.
// A batch of ten debited for each of its requests, which the full map cannot hold, would let
// the key admit two. Package filter tests the same natively
// (TestLocalLeaseMapFullDecidesExactly, and TestLeaseMapFullDecidesExactly for global rules).
func TestLeaseWasmMapFullDecidesExactly(t *testing.T) {
	t.Parallel()
	rules := `{"rules":[{"name":"u","key":[{"source":"header","name":"x-u"}],"algorithm":"fixed_window","limit":20,"window":"1h","lease":{"batch":10,"ttl":"1m"}}]}`
	h, _ := virtualHost(t, rules, 1, nil)
	taken := func() int64 { v, _ := h.Metric("ratelimit_lease_taken_total;rule=u"); return v }
	for i := range 4096 {
		o, _ := doTimed(t, h, hdr("x-u", fmt.Sprint("flood", i)))
		require.Zero(t, o.Status)
	}
	require.EqualValues(t, 4096, taken(), "every flood key holds a lease")
	admitted := 0
	for range 25 {
		o, _ := doTimed(t, h, hdr("x-u", "victim"))
		if o.Status == 0 {
			admitted++
		}
	}
	require.Equal(t, 20, admitted, "the victim's key admits exactly its limit")
	require.EqualValues(t, 4096, taken(), "and takes no batch")
}
