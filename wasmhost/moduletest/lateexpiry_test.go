package moduletest

import (
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestGlobalWasmLateBatchAfterTTLIsDropped: the compiled module on the virtual clock, one
// worker, redis.partitions 1, rule y leased with ttl 100 ms (redis.timeout 2 s). A request's
// call for y's batch is held back; 50 ms later another request takes and holds a batch on the
// same key; at 110 ms the first client resets its stream and only then does its answer
// arrive, after the batch's ttl (counted from the call's send). The late batch is counted as
// dropped at once, all ten units, and the live lease is kept: the key's next request spends
// it, with no new take. Holding the expired batch instead would replace the live lease (its
// nine units dropped) and the next request would drop the expired ten and take a third batch.
// Package filter tests the same natively (TestLateBatchAfterTTLIsDropped).
func TestGlobalWasmLateBatchAfterTTLIsDropped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "%3Alate/")
	rules := xyLeaseRules(`"lease":{"batch":10,"ttl":"100ms"}`)
	h, clock := virtualHost(t, globalConfig(redisOpts{}, rules), 1, map[string]string{"webdis": front.URL})
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	dropped := func() int64 { return redisMetric(h, "ratelimit_lease_units_dropped_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	// The first request loads the script (NOSCRIPT, then the script in full).
	o, _ := doTimed(t, h, hdr("x-k", "W"), hdr("x-y", "warm"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 1, taken())

	reset := holdAndReset(t, h, relay, calls, hdr("x-k", "A"), hdr("x-y", "late"))
	relay.hold.Store(false)

	clock.Advance(50 * time.Millisecond)
	o, _ = doTimed(t, h, hdr("x-k", "B"), hdr("x-y", "late"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 2, taken(), "the later request takes and holds a batch")

	clock.Advance(60 * time.Millisecond)
	reset()
	close(relay.release)
	eventually(t, "the expired late batch is dropped, all of it", func() bool { return dropped() == 10 })

	before := calls()
	o, _ = doTimed(t, h, hdr("x-k", "C"), hdr("x-y", "late"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 2, taken(), "the live lease admits the key's next request: no new take")
	require.EqualValues(t, 10, dropped())
	require.EqualValues(t, 1, calls()-before, "one call, for x only")
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}
