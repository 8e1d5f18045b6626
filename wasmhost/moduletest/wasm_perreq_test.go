package moduletest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

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

// Against the compiled module: a webdis cluster without hosts makes Envoy fail
// proxy_http_call at once with InternalFailure, and no answer ever comes. Each failure mode
// applies at once, the failure is counted as unavailable (not as a reset), and it feeds the
// breaker, which then stops trying.
func TestGlobalWasmClusterWithoutHosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		want int // 0: continued
	}{{"allow", 0}, {"deny", 429}, {"local", 0}} {
		t.Run(tc.mode, func(t *testing.T) {
			rules := "[" + globalRule("nohosts", `"algorithm":"fixed_window","limit":100,"window":"1h"`, false) + "]"
			h := newWasm(t, globalConfig(redisOpts{FailureMode: tc.mode, Failures: 3, Cooldown: "10m"}, rules),
				wasmOptions{workers: 1, clusters: map[string]string{"webdis": wasmhost.ClusterNoHosts}, realTime: true}).host
			for i := range 5 {
				got, elapsed := doTimed(t, h)
				require.Equalf(t, tc.want, got.Status, "request %d", i)
				require.Less(t, elapsed, time.Second, "nothing waits for an answer that never comes")
			}
			require.EqualValues(t, 3, redisMetric(h, "ratelimit_redis_unavailable_total"))
			require.Zero(t, redisMetric(h, "ratelimit_redis_resets_total"))
			require.Zero(t, redisMetric(h, "ratelimit_redis_calls_total"), "nothing was sent")
			require.EqualValues(t, 2, redisMetric(h, "ratelimit_redis_skipped_total"), "the breaker opened after 3")
			require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_breaker_open"))
			if tc.mode == "local" {
				require.EqualValues(t, 5, redisMetric(h, "ratelimit_requests_total;rule=nohosts;decision=allowed"))
			}
			require.Zero(t, h.Stats().Traps)
		})
	}
}

// Against the compiled module: an adaptive rule whose limit fell to 117
// advertises q=117, not its configured 200. The controller in shared data is set to 117 (as
// by the controller's own update, at the scenarios' fixed instant, so no interval elapses and
// the limit stays); every worker VM adopts it on its next tick.
func TestAdaptivePolicyFollowsTheLimitWasm(t *testing.T) {
	t.Parallel()
	const rule = `{"name":"ad","algorithm":"adaptive","window":"1s",
		"adaptive":{"min_limit":10,"max_limit":200,"target_latency":"100ms","interval":"1s"}}`
	shared := wasmhost.NewSharedData()
	d := newWasm(t, `{"rules":[`+rule+`]}`, wasmOptions{workers: 2, shared: shared})
	lim, err := algorithms.New(algorithms.Config{Algorithm: algorithms.AlgAdaptive, Limit: 117, Window: time.Second,
		MinLimit: 10, MaxLimit: 200, TargetLatency: 100 * time.Millisecond, AdjustInterval: time.Second})
	require.NoError(t, err)
	_, state := lim.(*algorithms.Adaptive).Update(nil, algorithms.Signals{}, t0.UnixNano())
	require.Equal(t, wasmhost.StatusOK, shared.Set("ratelimit", "rl|ad|ctrl", state, 0))

	require.Eventually(t, func() bool {
		return hostMetric(t, d.host, "ratelimit_adaptive_limit;rule=ad") == 117
	}, 5*time.Second, 10*time.Millisecond, "the workers adopt the controller's limit")
	for worker := range 2 {
		require.Eventuallyf(t, func() bool {
			req := d.request(step{})
			req.Worker = worker
			res, err := d.host.Do(context.Background(), req)
			require.NoError(t, err)
			return outcomeOf(res).Headers["ratelimit-policy"] == `"ad";q=117;w=1`
		}, 5*time.Second, 20*time.Millisecond, "worker %d advertises the limit in force", worker)
	}
	require.Zero(t, d.host.Stats().Traps)
}

// Against the compiled module: a webdis answer with a retry-after of 2^63-1
// ns (well-formed, absurd) is clamped to the rule's longest wait, two minutes for gcra 5 per
// minute, in Retry-After, RateLimit and the deny body.
func TestAbsurdRetryAfterIsClampedWasm(t *testing.T) {
	t.Parallel()
	url := scriptAnswerServer(t, `{"EVALSHA":[1764504000,0,0,%s,0,5,0,9223372036854775807,9223372036854775807,0]}`)
	rules := "[" + globalRule("g", `"algorithm":"gcra","limit":5,"window":"1m"`, false) + "]"
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), url, 1)
	got, _ := doTimed(t, h)
	require.Equal(t, 429, got.Status)
	require.Equal(t, "120", got.Headers["retry-after"])
	require.Equal(t, `"g";r=0;t=120`, got.Headers["ratelimit"])
	require.Equal(t, "5", got.Headers["x-ratelimit-limit"])
	require.Equal(t, "120", got.Headers["x-ratelimit-reset"])
	require.Contains(t, got.Body, `"retry_after":120`)
	require.Zero(t, h.Stats().Traps)
}

// Against the compiled module with the host's header map: a repeated
// x-api-key (one entry per line, as Envoy keeps it) is refused and counted; a repeated
// user-agent, which Envoy folds into one "a,b" value before the filter sees it (and sends
// upstream as that one value), is keyed on that value and not refused.
func TestDuplicateKeyHeaderWasm(t *testing.T) {
	t.Parallel()
	d := newWasm(t, `{"rules":[
		{"name":"ua","continue":true,"key":[{"source":"header","name":"user-agent"}],"algorithm":"fixed_window","limit":1,"window":"1m"},
		{"name":"per-key","key":[{"source":"header","name":"x-api-key"}],"algorithm":"fixed_window","limit":3,"window":"1m"}]}`,
		wasmOptions{})
	for i := range 10 {
		got := d.Do(t, t0, step{Headers: [][2]string{hdr("x-api-key", "rnd"+strconv.Itoa(i)), hdr("x-api-key", "real")}})
		require.Equal(t, 400, got.Status, "request %d", i)
		require.Contains(t, got.Body, `"header":"x-api-key"`)
	}
	require.EqualValues(t, 10, hostMetric(t, d.host, "ratelimit_requests_total;rule=per-key;decision=duplicate_header"))
	require.Zero(t, hostMetric(t, d.host, "ratelimit_requests_total;rule=per-key;decision=allowed"), "10 of 10 refused, none counted")

	folded := step{Headers: [][2]string{hdr("user-agent", "a"), hdr("x-api-key", "k"), hdr("user-agent", "b")}}
	got := d.Do(t, t0, folded)
	require.Zero(t, got.Status, "%v", got)
	require.Equal(t, `"ua";r=0;t=60, "per-key";r=2;t=60`, got.Headers["ratelimit"])
	got = d.Do(t, t0, step{Headers: [][2]string{hdr("user-agent", "a,b"), hdr("x-api-key", "k")}})
	require.Equal(t, 429, got.Status, "two user-agent lines and one line a,b are the same key")
	require.Zero(t, hostMetric(t, d.host, "ratelimit_requests_total;rule=ua;decision=duplicate_header"))
	require.Zero(t, d.host.Stats().Traps)
}

// A shadow rule's repeated key header is counted once, in duplicate_header, and not also in
// skipped: the rule's decisions add up to the requests it saw.
func TestShadowDuplicateKeyHeaderCountedOnceWasm(t *testing.T) {
	t.Parallel()
	d := newWasm(t, `{"rules":[
		{"name":"dry","shadow":true,"key":[{"source":"header","name":"x-user"}],"algorithm":"fixed_window","limit":5,"window":"1m"}]}`,
		wasmOptions{})
	got := d.Do(t, t0, step{Headers: [][2]string{hdr("x-user", "u1"), hdr("x-user", "u2")}})
	require.Zero(t, got.Status, "a shadow rule never refuses: %v", got)
	require.EqualValues(t, 1, hostMetric(t, d.host, "ratelimit_requests_total;rule=dry;decision=duplicate_header"))
	require.Zero(t, hostMetric(t, d.host, "ratelimit_requests_total;rule=dry;decision=skipped"))
}
