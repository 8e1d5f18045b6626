package moduletest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// hostileLate relays script calls to webdis. While hold is set it keeps each call until
// release is closed and then answers it with forged, the answer of a broken or hostile webdis
// (a stand-in in front of Redis), or, when forged is nil, with Redis's own answer. release and
// forged are set before hold.
type hostileLate struct {
	webdis  string
	hold    atomic.Bool
	release chan struct{}
	forged  func(n int64) (status int, body []byte)
	n       atomic.Int64
}

func (r *hostileLate) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if r.hold.Load() {
		n := r.n.Add(1)
		<-r.release
		if r.forged != nil {
			status, forged := r.forged(n)
			w.WriteHeader(status)
			_, _ = w.Write(forged)
			return
		}
	}
	resp, err := http.Post(strings.TrimSuffix(r.webdis, "/")+"/", req.Header.Get("content-type"), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// resetMany starts n requests at once, waits until each one's Redis call is out (calls
// reaches want), and then resets every client's stream together.
func resetMany(t *testing.T, h *wasmhost.Host, n int, calls func() int64, want int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, n)
	for range n {
		go func() {
			_, err := h.Do(ctx, globalRequest())
			done <- err
		}()
	}
	eventually(t, "every request's call is out", func() bool { return calls() == want })
	cancel()
	for range n {
		require.ErrorIs(t, <-done, context.Canceled, "the client reset the stream")
	}
}

// TestGlobalWasmLateHostileAnswers attacks the late-answer path of the compiled module (one
// worker, redis.partitions 1, breaker threshold 6). First eight clients reset their streams
// at once while healthy Redis answers late: every answer is measured once and is a success,
// so resets alone never open the breaker. Then five clients reset while their calls are held,
// and the calls are answered by a hostile stand-in: 200 with bodies that are no script
// result (garbage, a truncated array, a huge body of 1 MiB, an array of the wrong length) and
// a 200 with an empty body. Each late answer must be counted exactly once, as malformed (one
// latency sample, one failure each), open nothing below the threshold, and neither trap, nor
// panic, nor log at error level: a late answer decides nothing, so nothing in it may harm the
// worker. A sixth hostile late answer then opens the breaker (threshold 6 consecutive
// failures), proving the five were heard.
func TestGlobalWasmLateHostileAnswers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	bodies := [][]byte{
		[]byte(`{"EVALSHA":`),
		[]byte(`{"EVALSHA":[1,2`),
		bytes.Repeat([]byte("["), 1<<20),
		[]byte(`{"EVALSHA":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}`),
		nil,
		[]byte(`not json at all`),
	}
	relay := &hostileLate{webdis: srv.WebdisURL()}
	front := httptest.NewServer(relay)
	t.Cleanup(front.Close)
	hold := func(forged func(int64) (int, []byte)) {
		relay.hold.Store(false)
		relay.release, relay.forged = make(chan struct{}), forged
		relay.hold.Store(true)
		release := relay.release
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
	}
	rules := "[" + globalRule("g", `"algorithm":"token_bucket","limit":100000,"window":"1h"`, false) + "]"
	h := newGlobalHost(t, globalConfig(redisOpts{FailureMode: "allow", Failures: 6, Cooldown: "10m"}, rules), front.URL, 1)
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }
	latency := func() uint64 {
		l, _ := h.Histogram("ratelimit_redis_latency_us")
		return l.Count
	}
	malformed := func() int64 { return redisMetric(h, "ratelimit_redis_malformed_total") }
	gauge := func() int64 { return redisMetric(h, "ratelimit_redis_breaker_open") }

	// Healthy Redis, eight resets at once; Redis's own answers arrive once every stream is gone.
	o, _ := doTimed(t, h)
	require.Zero(t, o.Status)
	hold(nil)
	resetMany(t, h, 8, calls, calls()+8)
	require.EqualValues(t, 1, latency(), "no late answer has arrived")
	close(relay.release)
	eventually(t, "every late answer is measured once", func() bool { return latency() == 9 })
	requireNoRedisFailures(t, h)
	require.Zero(t, gauge(), "resets alone never open the breaker")

	forged := func(n int64) (int, []byte) { return 200, bodies[(n-1)%int64(len(bodies))] }
	relay.n.Store(0)
	hold(forged)
	before, beforeLat := calls(), latency()
	resetMany(t, h, 5, calls, before+5)
	require.Zero(t, malformed(), "no answer has arrived")
	close(relay.release)
	eventually(t, "five hostile late answers are heard", func() bool { return malformed() == 5 })
	eventually(t, "and measured once each", func() bool { return latency() == beforeLat+5 })
	require.Zero(t, gauge(), "five failures are below the threshold")
	for _, m := range redisErrorMetrics {
		if m != "ratelimit_redis_malformed_total" {
			require.Zerof(t, redisMetric(h, m), "%s: a malformed answer is counted as malformed only", m)
		}
	}

	// The sixth consecutive failure, also late, opens the breaker.
	hold(forged)
	resetMany(t, h, 1, calls, before+6)
	require.EqualValues(t, 5, malformed(), "the sixth answer is held")
	close(relay.release)
	eventually(t, "the sixth hostile late answer is heard", func() bool { return malformed() == 6 })
	require.EqualValues(t, 1, gauge(), "six late failures in a row open the breaker")

	require.Zero(t, h.Stats().Traps)
	require.Empty(t, h.Stats().FailedVMs)
	requireCleanLogs(t, h)
	for _, e := range h.Logs() {
		require.NotEqual(t, wasmhost.LogError, e.Level, "a late answer logs no error: %+v", e)
	}
}
