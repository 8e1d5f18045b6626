package filter

import (
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/memstore"
	"github.com/stretchr/testify/require"
)

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

// An adaptive rule's denial when its shared data fails (failure_mode "deny") states the limit
// in force, in X-RateLimit-Limit as in RateLimit-Policy and the ratelimit_adaptive_limit
// gauge, not the rule's max_limit: a client told the larger limit would pace itself above what
// the rule admits.
func TestAdaptiveFailureDenialStatesTheLimitInForce(t *testing.T) {
	store := &failingStore{Memory: memstore.New()}
	d := newNativeWithStore(t, `{"failure_mode":"deny","rate_limit_headers":"both","rules":[{"name":"ad","algorithm":"adaptive","window":"1s",
		"adaptive":{"min_limit":5,"max_limit":100,"target_latency":"100ms","interval":"1s"}}]}`, store)
	at := time.Duration(0)
	// Errors from the upstream shrink the limit, one interval at a time.
	for i := range 4 {
		for range 20 {
			*d.now = t0.Add(at)
			id := d.host.InitializeHttpContext()
			d.host.CallOnRequestHeaders(id, step{}.RequestHeaders(), true)
			status := "503"
			if i == 0 {
				status = "200" // the first tick only starts the controller's interval
			}
			d.host.CallOnResponseHeaders(id, [][2]string{{":status", status}}, true)
			d.host.CompleteHttpContext(id)
		}
		at += time.Second
		*d.now = t0.Add(at)
		d.host.Tick()
	}
	inForce, err := d.host.GetGaugeMetric("ratelimit_adaptive_limit;rule=ad")
	require.NoError(t, err)
	require.Less(t, inForce, uint64(100), "the errors did not shrink the limit: the test set nothing up")

	store.failGet, store.failSet = true, true
	out := d.Do(t, t0.Add(at), step{})
	require.Equal(t, 429, out.Status, "failure_mode deny")
	want := strconv.FormatUint(inForce, 10)
	require.Equal(t, want, out.Headers["x-ratelimit-limit"], "X-RateLimit-Limit states the limit in force")
	require.Equal(t, `"ad";q=`+want+`;w=1`, out.Headers["ratelimit-policy"], "RateLimit-Policy states the same limit")
}
