package moduletest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/fakellm"
	"github.com/stretchr/testify/require"
)

// globalUsageConfig is usageRule made global, with algorithm alg, on the webdis cluster.
func globalUsageConfig(alg string, capacity, reserve, max int, onMissing string) string {
	rule := usageRule("openai", capacity, reserve, max, []string{"/usage/total_tokens"}, onMissing)
	rule = strings.Replace(rule, `"algorithm":"token_bucket"`, `"scope":"global","algorithm":"`+alg+`"`, 1)
	if alg == "gcra" {
		rule = strings.Replace(rule, `"window":"31d"`, `"window":"31d","burst":`+strconv.Itoa(capacity), 1)
	}
	return globalConfig(redisOpts{}, "["+rule+"]")
}

// settled waits until no reservation is open and every call the proxy sent to webdis has
// answered (each answer is recorded in ratelimit_redis_latency_us): a stream's settlement is
// sent when the host logs it, which may be after Do returned, and nothing waits for it.
func settled(t *testing.T, h *wasmhost.Host) {
	t.Helper()
	require.Eventually(t, func() bool { v, _ := h.Metric("ratelimit_usage_open;rule=openai"); return v == 0 },
		callDeadline, time.Millisecond)
	require.Eventually(t, func() bool {
		calls, _ := h.Metric("ratelimit_redis_calls_total")
		lat, _ := h.Histogram("ratelimit_redis_latency_us")
		return uint64(calls) == lat.Count
	}, callDeadline, time.Millisecond)
}

// TestUsageGlobalStreamsWasm: fifty streams at once on one key on each of two proxies (two
// hosts of four workers) sharing one Redis, with random usages, upstream cuts and client
// aborts. The reservations open at once never exceed the capacity across both proxies, the
// usage above the capacity is bounded by the streams in flight, and once every settlement
// has answered the key has been charged exactly the reported usage plus the on_missing
// charges of both proxies: the global rule counts once for the two.
func TestUsageGlobalStreamsWasm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// A capacity that admits 30 of the 100 streams (the bound), and one that admits them all
	// and is left with a balance (the exact charge, read back from Redis).
	for _, tc := range []struct {
		alg      string
		capacity int
	}{{"token_bucket", 3000}, {"token_bucket", 50000}, {"gcra", 3000}, {"gcra", 50000},
		{"fixed_window", 50000}, {"sliding_window", 50000}} {
		alg, capacity := tc.alg, tc.capacity
		t.Run(alg+"/"+strconv.Itoa(capacity), func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			loadScripts(t, srv)
			const reserve, maxUsage = 100, 400
			config := globalUsageConfig(alg, capacity, reserve, maxUsage, "max")
			proxies := []*wasmDriver{
				{host: newGlobalHost(t, config, srv.WebdisURL(), 4)},
				{host: newGlobalHost(t, config, srv.WebdisURL(), 4)},
			}
			var wg sync.WaitGroup
			type result struct{ admitted, charged, used int }
			results := make([]result, len(proxies))
			for p, d := range proxies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[p].admitted, results[p].charged, results[p].used, _ = concurrentStreams(d, uint64(p), capacity, reserve, maxUsage)
				}()
			}
			wg.Wait()
			admitted, charged, used := 0, 0, 0
			for p, d := range proxies {
				settled(t, d.host)
				r := results[p]
				admitted, charged, used = admitted+r.admitted, charged+r.charged, used+r.used
				require.Eventually(t, func() bool {
					v, _ := d.host.Metric("ratelimit_usage_settled_total;rule=openai")
					return v == int64(r.charged)
				}, callDeadline, time.Millisecond, "settled_total never reached the charged %d", r.charged)
				settled(t, d.host)
				require.Zero(t, redisMetric(d.host, "ratelimit_usage_settle_failures_total;rule=openai"))
				if redisMetric(d.host, "ratelimit_redis_malformed_total") > 0 {
					for _, e := range d.host.Logs() {
						t.Logf("log: %+v", e)
					}
				}
				requireNoRedisFailures(t, d.host)
				requireCleanLogs(t, d.host)
			}
			t.Logf("admitted %d of 100 on two proxies; charged %d, used %d", admitted, charged, used)
			require.LessOrEqual(t, used, capacity+capacity/reserve*(maxUsage-reserve),
				"usage above the capacity is bounded by the streams in flight, across both proxies")
			if left := capacity - charged; left >= reserve {
				require.Equal(t, left-reserve, remaining(t, proxies[0], "openai", "shared"),
					"charged exactly the usage and the on_missing charges of both proxies")
				// The probe's own settlement answers before the host closes: webdis, whose
				// client goes away in the middle of a call, was seen to hand that call's reply
				// to the next subtest's call.
				settled(t, proxies[0].host)
			} else {
				res, err := proxies[1].host.Do(context.Background(), llmRequest("openai", "shared", fakellm.Reply{Stream: true}))
				require.NoError(t, err)
				require.NotNil(t, res.Local, "a key %d below its reservation is denied", reserve-left)
				settled(t, proxies[1].host)
			}
		})
	}
}

// TestUsageGlobalDeadRedisWasm: Redis dies while a stream is open. The client gets the whole
// response as usual; the settlement is sent again on the VM's tick 1 s and 2 s after each
// failure, and counted as failed after its third try.
func TestUsageGlobalDeadRedisWasm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	d := &wasmDriver{host: newGlobalHost(t, globalUsageConfig("gcra", 3000, 100, 400, "reserve"), srv.WebdisURL(), 2)}
	rep := fakellm.Reply{Shape: fakellm.OpenAI, Stream: true, Input: 100, Output: 150, Words: 3}
	req := llmRequest("openai", "k", rep)
	req.Upstream.ChunkDelay = 300 * time.Millisecond
	open := make(chan struct{})
	go func() {
		require.Eventually(t, func() bool { v, _ := d.host.Metric("ratelimit_usage_open;rule=openai"); return v == 1 },
			callDeadline, time.Millisecond)
		srv.StopRedis()
		close(open)
	}()
	t.Cleanup(srv.StartRedis)
	res, err := d.host.Do(context.Background(), req)
	<-open
	require.NoError(t, err)
	require.Nil(t, res.Local)
	var whole []byte
	for _, c := range req.Upstream.Chunks {
		whole = append(whole, c...)
	}
	require.Equal(t, string(whole), string(res.ResponseBody), "the client gets the body unchanged")
	require.Eventually(t, func() bool {
		v, _ := d.host.Metric("ratelimit_usage_settle_failures_total;rule=openai")
		return v == 1
	}, 10*time.Second, 10*time.Millisecond)
	settled(t, d.host)
	require.EqualValues(t, 2, metric(t, d, "ratelimit_usage_settle_retries_total;rule=openai"))
	require.EqualValues(t, 150, metric(t, d, "ratelimit_usage_debt_total;rule=openai"))
	// Each try counted by kind: webdis answers 503 while it reconnects, or fails the call
	// otherwise.
	failures := int64(0)
	for _, m := range redisErrorMetrics {
		failures += redisMetric(d.host, m)
	}
	require.Equal(t, int64(3), failures)
}
