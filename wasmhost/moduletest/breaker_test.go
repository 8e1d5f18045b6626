package moduletest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// TestGlobalWasmLateFailuresOpenBreaker: the compiled module, one worker, breaker threshold 2.
// Redis is down and two requests' calls are held back by the relay; both clients reset their
// streams, the host tears the streams down, and only then does webdis answer each call 503.
// The VM hears both failures (every Redis call is sent with abi.DispatchHttpCallAlways, and
// the filter records a gone stream's answer, lateOutcome): they are counted as unavailable
// and open the breaker, so the next request skips Redis at once. Dropped with their streams,
// the answers of clients that give up before Redis answers would never open the breaker, and
// every request would keep waiting for Redis. Package filter tests the same natively,
// and that a late success closes the breaker (TestLateAnswerFeedsBreaker).
func TestGlobalWasmLateFailuresOpenBreaker(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "EVAL")
	rules := "[" + globalRule("g", `"algorithm":"token_bucket","limit":1000,"window":"1h"`, false) + "]"
	h := newGlobalHost(t, globalConfig(redisOpts{FailureMode: "allow", Failures: 2, Cooldown: "10m"}, rules), front.URL, 1)
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }
	unavailable := func() int64 { return redisMetric(h, "ratelimit_redis_unavailable_total") }

	srv.StopRedis()
	relay.hold.Store(true)
	for i := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := h.Do(ctx, globalRequest())
			done <- err
		}()
		eventually(t, "the request's call is out", func() bool { return calls() == int64(i+1) })
		cancel()
		require.ErrorIs(t, <-done, context.Canceled, "the client reset the stream")
	}
	require.Zero(t, unavailable(), "no answer has arrived")
	close(relay.release)
	eventually(t, "both late failures are heard", func() bool { return unavailable() == 2 })
	require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_breaker_open"), "and open the breaker")

	o, _ := doTimed(t, h)
	require.Zero(t, o.Status, "failure_mode allow")
	require.EqualValues(t, 2, calls(), "the open breaker skips Redis")
	require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_skipped_total"))
	require.Zero(t, h.Stats().Traps)
	requireCleanLogs(t, h)
}

// doOn runs one global request on the given worker VM.
func doOn(t testing.TB, h *wasmhost.Host, worker int) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	req := globalRequest()
	req.Worker = worker
	res, err := h.Do(ctx, req)
	require.NoError(t, err, "the request must complete within %v", callDeadline)
	require.False(t, res.Failed, "the VM failed: %v", res.Local)
	return outcomeOf(res)
}

// Against the compiled module: with two worker VMs, each with its own breaker,
// ratelimit_redis_breaker_open counts the workers that are open. When one of two open workers
// closes, the gauge must still say one is open (a per-worker 1 or 0 would read 0), and a VM
// retired with its breaker open takes its share with it.
func TestGlobalWasmBreakerGaugeAcrossWorkers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const cooldown = 200 * time.Millisecond
	rules := "[" + globalRule("gauge", `"algorithm":"token_bucket","limit":1000,"window":"1h"`, false) + "]"
	metrics := wasmhost.NewMetricStore()
	// The breaker's cooldown is the filter's own time: on the host's virtual clock it passes
	// exactly when the test advances it, however loaded the machine.
	clock := wasmhost.NewVirtualClock(t0)
	start := func() *wasmhost.Host {
		h, err := wasmhost.New(context.Background(), wasmtest.BuildModule(t), wasmhost.Options{
			Workers: 2, VMID: "ratelimit", PluginName: "ratelimit",
			PluginConfig: []byte(globalConfig(redisOpts{Timeout: "1s", FailureMode: "allow",
				Failures: 1, Cooldown: cooldown.String()}, rules)),
			Clusters:     map[string]string{"webdis": srv.WebdisURL()},
			MetricStore:  metrics,
			VirtualClock: clock,
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close(context.Background()) })
		return h
	}
	h := start()
	gauge := func() int64 { return redisMetric(h, "ratelimit_redis_breaker_open") }

	require.Contains(t, doOn(t, h, 0).Headers, "ratelimit")
	require.Contains(t, doOn(t, h, 1).Headers, "ratelimit")
	srv.StopRedis()
	doOn(t, h, 0)
	require.EqualValues(t, 1, gauge(), "worker 0 is open")
	doOn(t, h, 1)
	require.EqualValues(t, 2, gauge(), "both workers are open")
	require.EqualValues(t, 2, redisMetric(h, "ratelimit_redis_breaker_opened_total"))

	srv.StartRedis()
	waitWebdis(t, srv)
	// Until the cooldown has passed, the open worker does not probe, even with Redis back.
	clock.Advance(cooldown - time.Nanosecond)
	require.NotContains(t, doOn(t, h, 0).Headers, "ratelimit", "worker 0 is still open")
	require.EqualValues(t, 2, gauge())
	clock.Advance(time.Nanosecond)
	require.Contains(t, doOn(t, h, 0).Headers, "ratelimit", "worker 0's probe is decided by Redis")
	require.EqualValues(t, 1, gauge(), "worker 1 is still open")
	require.Contains(t, doOn(t, h, 1).Headers, "ratelimit")
	require.Zero(t, gauge(), "every worker is closed")

	// A configuration update replaces the VMs; the stats stay. A VM that goes away with its
	// breaker open must not leave the gauge saying so for good.
	srv.StopRedis()
	doOn(t, h, 1)
	require.EqualValues(t, 1, gauge())
	require.NoError(t, h.Close(context.Background()))
	require.Zero(t, redisMetric(h, "ratelimit_redis_breaker_open"), "the retired VM took its share")
	require.EqualValues(t, 3, redisMetric(h, "ratelimit_redis_breaker_opened_total"))
	require.Zero(t, h.Stats().Traps)
}
