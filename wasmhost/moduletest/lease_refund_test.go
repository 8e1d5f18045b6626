package moduletest

import (
	"fmt"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestGlobalWasmResetGivesLeaseUnitsBack: the compiled module, redis.partitions 1, one worker.
// y's lease (batch 10) holds nine units; a request spends one of them and waits for Redis on
// x, and its client resets the stream. The request never reached the upstream, so its unit
// goes back to y's lease: the key's next nine requests spend the lease, and only the tenth
// takes a new batch. Package filter tests the same natively (TestResetGivesLeaseUnitsBack).
func TestGlobalWasmResetGivesLeaseUnitsBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "resetme")
	rules := xyLeaseRules(`"lease":{"batch":10,"ttl":"1m"}`)
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), front.URL, 1)
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	o, _ := doTimed(t, h, hdr("x-k", "A"), hdr("x-y", "k"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 1, taken(), "y holds nine units")

	reset := holdAndReset(t, h, relay, calls, hdr("x-k", "resetme"), hdr("x-y", "k"))
	reset()
	close(relay.release)
	relay.hold.Store(false)

	for i := range 9 {
		o, _ = doTimed(t, h, hdr("x-k", fmt.Sprint("C", i)), hdr("x-y", "k"))
		require.Zero(t, o.Status)
		require.EqualValues(t, 1, taken(), "request %d spends y's lease", i)
	}
	o, _ = doTimed(t, h, hdr("x-k", "D"), hdr("x-y", "k"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 2, taken(), "the lease is spent: y takes another batch")
	require.Zero(t, redisMetric(h, "ratelimit_lease_units_dropped_total;rule=y"))
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}
