package filter

import (
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/stretchr/testify/require"
)

// nativeRedisWorker is one worker VM's Redis client under the emulator: its own breaker, and
// the process-wide metrics every worker shares (defining a metric again yields the same one).
func nativeRedisWorker(t *testing.T, failures int) *httpContext {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"redis":{"cluster":"webdis","breaker":{"failures":` +
		strconv.Itoa(failures) + `,"cooldown":"10s"}},"rules":[{"name":"g","scope":"global","algorithm":"gcra","limit":5,"window":"1m"}]}`))
	require.NoError(t, err)
	c, err := newRedisClient(cfg.Redis)
	require.NoError(t, err)
	return &httpContext{plugin: &plugin{cfg: cfg, redis: c}}
}

func gaugeNative(t *testing.T, d *nativeDriver, name string) int64 {
	t.Helper()
	v, err := d.host.GetGaugeMetric(name)
	require.NoError(t, err)
	return int64(v)
}

func counterNative(d *nativeDriver, name string) uint64 {
	v, _ := d.host.GetCounterMetric(name)
	return v
}

// ratelimit_redis_breaker_open counts the worker VMs whose breaker is open. Recording 1 and 0
// per worker would make it say whatever the last worker said: with two workers open and one
// closing again it would read 0.
func TestBreakerGaugeCountsOpenWorkersNative(t *testing.T) {
	d := newNativeGlobal(t, "allow")
	w1, w2 := nativeRedisWorker(t, 1), nativeRedisWorker(t, 1)
	const open = "ratelimit_redis_breaker_open"
	require.Zero(t, gaugeNative(t, d, open))
	w1.noteFailure(t0.UnixNano(), errCalloutReset)
	require.EqualValues(t, 1, gaugeNative(t, d, open))
	w2.noteFailure(t0.UnixNano(), errCalloutReset)
	require.EqualValues(t, 2, gaugeNative(t, d, open), "both workers are open")
	// A failed probe opens w1 again: it is still one worker.
	w1.noteFailure(t0.UnixNano(), errCalloutReset)
	require.EqualValues(t, 2, gaugeNative(t, d, open))
	require.EqualValues(t, 2, counterNative(d, "ratelimit_redis_breaker_opened_total"))
	// w1 closes; w2 is still open, and the gauge says so.
	require.True(t, w1.plugin.redis.breaker.success())
	w1.plugin.redis.gauge.set(false)
	require.EqualValues(t, 1, gaugeNative(t, d, open))
	// w2's VM goes away with its breaker open: its share leaves with it.
	require.True(t, w2.plugin.OnPluginDone())
	require.Zero(t, gaugeNative(t, d, open))
}

// A callout that Envoy refuses at once with InternalFailure (the cluster has no host) is an
// unavailable Redis, and feeds the breaker; it is not counted as a reset.
func TestCalloutWithoutHostsIsUnavailableNative(t *testing.T) {
	d := newNativeGlobal(t, "allow")
	w := nativeRedisWorker(t, 2)
	for range 2 {
		w.noteFailure(t0.UnixNano(), sendError(abi.ErrInternalFailure))
	}
	require.EqualValues(t, 2, counterNative(d, "ratelimit_redis_unavailable_total"))
	require.Zero(t, counterNative(d, "ratelimit_redis_resets_total"))
	require.EqualValues(t, 1, gaugeNative(t, d, "ratelimit_redis_breaker_open"), "two failures open the breaker")
	// Any other refusal (a cluster Envoy does not know) stays a reset.
	w.noteFailure(t0.UnixNano(), sendError(abi.ErrBadArgument))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_redis_resets_total"))
}

// An adaptive rule advertises the limit in force, not its configured
// maximum. The limit falls under upstream errors; every response's RateLimit-Policy must say
// what the gauge says.
func TestAdaptivePolicyFollowsTheLimitNative(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"ad","algorithm":"adaptive","window":"1s",
		"adaptive":{"min_limit":10,"max_limit":200,"target_latency":"100ms","interval":"1s"}}]}`)
	at := time.Duration(0)
	serve := func(status string) string {
		*d.now = t0.Add(at)
		id := d.host.InitializeHttpContext()
		d.host.CallOnRequestHeaders(id, step{}.RequestHeaders(), true)
		d.host.CallOnResponseHeaders(id, [][2]string{{":status", status}}, true)
		policy := filtertest.HeaderMap(d.host.GetCurrentResponseHeaders(id))["ratelimit-policy"]
		d.host.CompleteHttpContext(id)
		return policy
	}
	require.Equal(t, `"ad";q=200;w=1`, serve("200"))
	for range 6 {
		for range 20 {
			serve("503")
		}
		at += time.Second
		*d.now = t0.Add(at)
		d.host.Tick()
	}
	limit := gaugeNative(t, d, "ratelimit_adaptive_limit;rule=ad")
	require.Less(t, limit, int64(200), "errors must have lowered the limit")
	require.Equal(t, `"ad";q=`+strconv.FormatInt(limit, 10)+`;w=1`, serve("200"))
}

// A Redis answer with an absurd retry-after (2^63-1 ns) is clamped to the
// rule's longest wait (gcra 5 per minute: two minutes) instead of overflowing into
// "Retry-After: -9223372035".
func TestAbsurdRetryAfterIsClampedNative(t *testing.T) {
	d := newNativeGlobal(t, "deny")
	id, callout := d.startGlobal(t, "a")
	d.answerScript(id, callout, `{"EVALSHA":[1764504000,0,0,%s,0,5,0,9223372036854775807,9223372036854775807,0]}`)
	resp := d.host.GetSentLocalResponse(id)
	require.NotNil(t, resp)
	require.EqualValues(t, 429, resp.StatusCode)
	h := filtertest.HeaderMap(resp.Headers)
	require.Equal(t, "120", h["retry-after"])
	require.Equal(t, `"g";r=0;t=120`, h["ratelimit"])
	require.Contains(t, string(resp.Data), `"retry_after":120`)
}

// policyRate's contract on windows of fractional seconds and on windows of whole seconds.
func TestPolicyRate(t *testing.T) {
	for _, tc := range []struct {
		limit  int64
		window time.Duration
		q, w   int64
	}{
		{5, 500 * time.Millisecond, 10, 1},
		{3, 1500 * time.Millisecond, 2, 1},
		{7, 1300 * time.Millisecond, 70, 13},
		{100, time.Minute, 100, 60},
		{5, 10 * time.Second, 5, 10},
		{1, time.Millisecond, 1000, 1},
		{1_000_000_000, 1001 * time.Millisecond, 1_000_000_000_000, 1001},
		{1, 31*24*time.Hour + time.Millisecond, 1000, 2678400001},
		{1, 7 * time.Millisecond, 1000, 7},
		{1, 90 * time.Minute, 1, 5400},
		{7, 90*time.Minute + 500*time.Millisecond, 2, 1543}, // 5400.5 s is 7 * 771.5 s
		{1_000_000_000, time.Millisecond, 1_000_000_000_000, 1},
		{1_000_000_000, 7 * time.Millisecond, 1_000_000_000_000, 7},
	} {
		q, w := policyRate(tc.limit, tc.window)
		require.Equalf(t, [2]int64{tc.q, tc.w}, [2]int64{q, w}, "%d per %v", tc.limit, tc.window)
		// q/w == limit/window exactly: q * window == limit * w seconds (in big integers,
		// as the products overflow an int64).
		lhs := new(big.Int).Mul(big.NewInt(q), big.NewInt(int64(tc.window)))
		rhs := new(big.Int).Mul(big.NewInt(tc.limit*w), big.NewInt(int64(time.Second)))
		require.Zero(t, lhs.Cmp(rhs), "%d per %v", tc.limit, tc.window)
	}
}

// The adaptive policy is rendered per request into a reused buffer: no allocation.
func BenchmarkAppendPolicyAdaptive(b *testing.B) {
	rs := &ruleState{rule: &config.Rule{Name: "ad"}, adaptive: &adaptiveState{lim: &adaptiveLimiter{limit: 117}}}
	rs.rule.Algorithm.Window = 1300 * time.Millisecond
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = rs.appendPolicy(buf[:0])
	}
	if allocs := testing.AllocsPerRun(100, func() { buf = rs.appendPolicy(buf[:0]) }); allocs != 0 {
		b.Fatalf("%v allocations per policy", allocs)
	}
}

// Each refusal of a repeated key header is counted on the rule; a shadow
// rule counts it once, in duplicate_header, and skips the request instead of refusing it.
func TestDuplicateKeyHeaderMetricNative(t *testing.T) {
	d := newNative(t, `{"rules":[
		{"name":"dry","shadow":true,"continue":true,"key":[{"source":"header","name":"x-user"}],"algorithm":"fixed_window","limit":5,"window":"1m"},
		{"name":"per-key","key":[{"source":"header","name":"x-api-key"}],"algorithm":"fixed_window","limit":5,"window":"1m"}]}`)
	dup := step{Headers: [][2]string{hdr("x-api-key", "a"), hdr("x-api-key", "b"), hdr("x-user", "u")}, Want: 400}
	shadowDup := step{Headers: [][2]string{hdr("x-api-key", "a"), hdr("x-user", "u1"), hdr("x-user", "u2")}}
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{dup, dup, shadowDup}})
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=duplicate_header"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=dry;decision=duplicate_header"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=allowed"), "the shadow rule's repetition let the request through")
	// Counted once: a request is one decision of the rule, so the rule's decisions add up to
	// the requests it saw (not in skipped as well).
	require.Zero(t, counterNative(d, "ratelimit_requests_total;rule=dry;decision=skipped"))
}

// With a single matched rule the repetition is found when its key is built (decideFrom), not
// by a check of every matched rule first: an enforced rule still refuses the request with 400
// and a shadow rule still counts it once, in duplicate_header only, and lets it through.
func TestDuplicateKeyHeaderSingleRuleNative(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"per-key","key":[{"source":"header","name":"x-api-key"},{"source":"client_ip"}],"algorithm":"fixed_window","limit":5,"window":"1m"}]}`)
	dup := step{Headers: [][2]string{hdr("x-api-key", "a"), hdr("x-api-key", "b")}, Want: 400,
		WantBody: `{"error":"duplicate_header","rule":"per-key"`}
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{dup, {Headers: [][2]string{hdr("x-api-key", "a")}}, dup}})
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=duplicate_header"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=allowed"))
	require.Zero(t, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=skipped"))
}

// The shadow half of TestDuplicateKeyHeaderSingleRuleNative (one emulator per test).
func TestDuplicateKeyHeaderSingleShadowRuleNative(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"dry","shadow":true,"key":[{"source":"header","name":"x-user","default":"-"}],"algorithm":"fixed_window","limit":5,"window":"1m"}]}`)
	shadowDup := step{Headers: [][2]string{hdr("x-user", "u1"), hdr("x-user", "u2")}}
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{shadowDup, shadowDup}})
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=dry;decision=duplicate_header"))
	require.Zero(t, counterNative(d, "ratelimit_requests_total;rule=dry;decision=skipped"))
	require.Zero(t, counterNative(d, "ratelimit_requests_total;rule=dry;decision=allowed"))
}

// A repeated key query parameter is counted in the same duplicate_header decision as a
// repeated key header, once per refused request.
func TestDuplicateKeyQueryMetricNative(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"q","key":[{"source":"query","name":"key"}],"algorithm":"fixed_window","limit":5,"window":"1m"}]}`)
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{{Path: "/x?key=a&key=b", Want: 400}, {Path: "/x?key=a"}}})
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=q;decision=duplicate_header"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=q;decision=allowed"))
}
