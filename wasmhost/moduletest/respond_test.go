package moduletest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// Two content-type lines of application/grpc reach the filter as Envoy's header map holds
// them, folded into one "application/grpc,application/grpc" value, which Envoy's
// Grpc::Common::hasGrpcContentType does not take for gRPC: Envoy would ignore a grpc_status
// and send the HTTP denial, so the filter must send that one whole, with its content-type and
// body. The native emulator keeps the lines apart, so this lives here alone.
func TestGrpcFoldedContentTypeIsHTTPWasm(t *testing.T) {
	t.Parallel()
	d := newWasm(t, `{"rules":[{"name":"one","algorithm":"fixed_window","limit":1,"window":"1s"}]}`, wasmOptions{})
	grpc := [][2]string{hdr("content-type", "application/grpc")}
	twice := [][2]string{hdr("content-type", "application/grpc"), hdr("content-type", "application/grpc")}
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{
		{Method: "POST", Path: "/pkg.Svc/Call", Headers: grpc},
		{Method: "POST", Path: "/pkg.Svc/Call", Headers: grpc, Want: 429, WantGrpcStatus: 8, WantNoBody: true},
		{Method: "POST", Path: "/pkg.Svc/Call", Headers: twice, Want: 429, WantGrpcStatus: -1,
			WantBody: `"rule":"one"`, WantHeaders: map[string]string{"content-type": "application/json"}},
	}})
	require.Zero(t, d.host.Stats().Traps, "the VM must never trap")
}

// A shadow rule's would-be denial goes upstream, and the upstream may answer with its own
// rate-limit fields. The filter adds its rule's fields beside them (as Envoy's own rate-limit
// filters add theirs, with addReferenceKey and copyFrom), so the client reads one RateLimit
// list with both items, and it never adds a Retry-After to a response it did not deny: the
// upstream's stays the one Retry-After, unchanged.
func TestUpstreamRateLimitFieldsKeptBesideTheFiltersWasm(t *testing.T) {
	t.Parallel()
	d := newWasm(t, `{"rules":[{"name":"dry","shadow":true,"shadow_headers":true,
		"algorithm":"fixed_window","limit":1,"window":"1m"}]}`, wasmOptions{})
	upstream := &wasmhost.UpstreamResponse{Status: 429, Headers: [][2]string{
		{"retry-after", "30"}, {"ratelimit", `"up";r=0;t=30`}, {"ratelimit-policy", `"up";q=10;w=60`}}}
	for i, want := range []string{`"dry";r=0;t=60`, `"dry";r=0;t=60`} {
		req := d.request(step{})
		req.Upstream = upstream
		res, err := d.host.Do(context.Background(), req)
		require.NoError(t, err)
		require.Nil(t, res.Local, "request %d: a shadow rule never denies", i)
		var retry, rl, policy []string
		for _, h := range res.ResponseHeaders {
			switch h[0] {
			case "retry-after":
				retry = append(retry, h[1])
			case "ratelimit":
				rl = append(rl, h[1])
			case "ratelimit-policy":
				policy = append(policy, h[1])
			}
		}
		require.Equal(t, []string{"30"}, retry, "request %d", i)
		require.Equal(t, []string{`"up";r=0;t=30`, want}, rl, "request %d", i)
		require.Equal(t, []string{`"up";q=10;w=60`, `"dry";q=1;w=60`}, policy, "request %d", i)
	}
	require.Zero(t, d.host.Stats().Traps, "the VM must never trap")
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
