package moduletest

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/stretchr/testify/require"
)

// TestMetricScenariosWasm runs filtertest.MetricScenarios against the compiled module: the
// requests, then the counters they leave in the host's stats.
func TestMetricScenariosWasm(t *testing.T) {
	for _, ms := range filtertest.MetricScenarios {
		t.Run(ms.Name, func(t *testing.T) {
			d := newWasm(t, ms.Config, wasmOptions{})
			ms.Check(t, d, func(name string) int64 { return hostMetric(t, d.host, name) })
			require.Zero(t, d.host.Stats().Traps, "the VM must never trap")
		})
	}
}

// Two content-type lines of application/grpc reach the filter as Envoy's header map holds
// them, folded into one "application/grpc,application/grpc" value, which Envoy's
// Grpc::Common::hasGrpcContentType does not take for gRPC: Envoy would ignore a grpc_status
// and send the HTTP denial, so the filter must send that one whole, with its content-type and
// body. The native emulator keeps the lines apart, so this lives here alone.
func TestGrpcFoldedContentTypeIsHTTPWasm(t *testing.T) {
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
