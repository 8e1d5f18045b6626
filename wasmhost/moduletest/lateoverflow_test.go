package moduletest

import (
	"fmt"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestGlobalWasmLateBatchOnOverflowIsDropped: the compiled module with redis.partitions 1, one
// worker. Rule y (lease batch 10, max_keys 4) has its four keys live, so a new key is decided
// on the rule's overflow key in Redis. A request for a new key asks for y's batch, the client
// resets the stream, and only then does Redis's answer arrive: the call committed, but a
// batch on the overflow key holds no lease, so all ten units are counted in
// lease_units_dropped at once and no lease is taken. Package filter tests the same natively
// (TestLateBatchOnOverflowIsDropped).
func TestGlobalWasmLateBatchOnOverflowIsDropped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "%3Alate/")
	rules := xyLeaseRules(`"max_keys":4,"lease":{"batch":10,"ttl":"1m"}`)
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), front.URL, 1)
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	dropped := func() int64 { return redisMetric(h, "ratelimit_lease_units_dropped_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	for i := range 4 {
		o, _ := doTimed(t, h, hdr("x-k", fmt.Sprint("fill", i)), hdr("x-y", fmt.Sprint("fill", i)))
		require.Zero(t, o.Status)
	}
	takenBefore, droppedBefore := taken(), dropped()

	reset := holdAndReset(t, h, relay, calls, hdr("x-k", "A"), hdr("x-y", "late"))
	reset()
	require.Equal(t, droppedBefore, dropped(), "the call's answer has not arrived")
	close(relay.release)
	eventually(t, "the late batch on the overflow key is dropped, all of it", func() bool { return dropped() == droppedBefore+10 })
	require.Equal(t, takenBefore, taken(), "and no lease is taken")
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}
