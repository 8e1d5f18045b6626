package moduletest

import (
	"context"
	"fmt"
	"net/http/httptest"
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
	srv := redistest.Start(t)
	relay := &heldBack{webdis: srv.WebdisURL(), tag: "resetme", release: make(chan struct{})}
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
		`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h","lease":{"batch":10,"ttl":"1m"}}]`
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), front.URL, 1)
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	o, _ := doTimed(t, h, hdr("x-k", "A"), hdr("x-y", "k"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 1, taken(), "y holds nine units")

	relay.hold.Store(true)
	before := calls()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.Do(ctx, globalRequest(hdr("x-k", "resetme"), hdr("x-y", "k")))
		done <- err
	}()
	eventually(t, "the request's call for x is out", func() bool { return calls() == before+1 })
	cancel()
	require.ErrorIs(t, <-done, context.Canceled, "the client reset the stream")
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
