package moduletest

import (
	"context"
	"fmt"
	"net/http/httptest"
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
	srv := redistest.Start(t)
	relay := &heldBack{webdis: srv.WebdisURL(), tag: "%3Alate/", release: make(chan struct{})}
	front := httptest.NewServer(relay)
	t.Cleanup(front.Close)
	t.Cleanup(func() {
		select {
		case <-relay.release:
		default:
			close(relay.release)
		}
	})
	rules := `[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":1000,"window":"1h"},` +
		`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h","max_keys":4,"lease":{"batch":10,"ttl":"1m"}}]`
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), front.URL, 1)
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	dropped := func() int64 { return redisMetric(h, "ratelimit_lease_units_dropped_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	for i := range 4 {
		o, _ := doTimed(t, h, hdr("x-k", fmt.Sprint("fill", i)), hdr("x-y", fmt.Sprint("fill", i)))
		require.Zero(t, o.Status)
	}
	takenBefore, droppedBefore := taken(), dropped()

	relay.hold.Store(true)
	before := calls()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.Do(ctx, globalRequest(hdr("x-k", "A"), hdr("x-y", "late")))
		done <- err
	}()
	eventually(t, "the request's call is out", func() bool { return calls() == before+1 })
	cancel()
	require.ErrorIs(t, <-done, context.Canceled, "the client reset the stream")
	require.Equal(t, droppedBefore, dropped(), "the call's answer has not arrived")
	close(relay.release)
	eventually(t, "the late batch on the overflow key is dropped, all of it", func() bool { return dropped() == droppedBefore+10 })
	require.Equal(t, takenBefore, taken(), "and no lease is taken")
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}
