package moduletest

import (
	"fmt"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestGlobalWasmPartitionedLateBatchIsHeld: the compiled module with partitions, one worker.
// Rule x denies a request while rule y's call for a lease batch is held back; the request is
// answered and its stream torn down, and only then does y's answer arrive. Redis committed the
// batch, and the VM holds it as its lease on the key (Envoy does not cancel a torn-down
// stream's callout, and the filter takes that answer on the root context,
// abi.DispatchHttpCallAlways): the key's next ten requests cost no call for y. Package filter
// tests the same natively (TestPartitionedLateBatchIsHeld).
func TestGlobalWasmPartitionedLateBatchIsHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "%7Brl%3Ay%3A")
	rules := `[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":1,"window":"1h"},` +
		`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h","lease":{"batch":10,"ttl":"1m"}}]`
	h := newGlobalHost(t, globalConfig(redisOpts{Partitions: 4}, rules), front.URL, 1)
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	o, _ := doTimed(t, h, hdr("x-k", "A"), hdr("x-y", "first"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 1, taken())

	relay.hold.Store(true)
	o, _ = doTimed(t, h, hdr("x-k", "A"), hdr("x-y", "late"))
	require.Equal(t, 429, o.Status, "x denies while y's call is held back")
	require.Contains(t, o.Body, `"rule":"x"`)
	require.EqualValues(t, 1, taken(), "y's answer has not arrived")
	close(relay.release)
	eventually(t, "y's late batch is held", func() bool { return taken() == 2 })
	relay.hold.Store(false)

	before := calls()
	for i := range 10 {
		o, _ = doTimed(t, h, hdr("x-k", fmt.Sprint("B", i)), hdr("x-y", "late"))
		require.Zero(t, o.Status, "request %d", i)
	}
	require.EqualValues(t, 10, calls()-before, "x's calls only: y spends the held batch")
	o, _ = doTimed(t, h, hdr("x-k", "C"), hdr("x-y", "late"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 12, calls()-before, "the batch is spent: y asks Redis again")
	require.Zero(t, redisMetric(h, "ratelimit_lease_units_dropped_total;rule=y"))
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}
