package moduletest

import (
	"context"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
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
