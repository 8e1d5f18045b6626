package moduletest

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// The host-call floor guest (wasmhost/testdata/hostfloor) makes, per request, exactly the
// host calls of the filter's 1-rule benchmark request, one for one, and as many allocator
// calls: the difference between the two in BenchmarkGuestPerRequest is the filter's own
// computation. So does a client seen before of the per-client floor ({"per_client":true}, the
// returning clients' floor). The filter's calls are listed here too, so that a change to them
// shows.
func TestHostFloorMakesTheFilterCalls(t *testing.T) {
	t.Parallel()
	rule := `{"name":"r0","continue":true,"key":[{"source":"client_ip"},{"source":"header","name":"x-tenant","default":"-"}],
		"algorithm":"token_bucket","limit":1000000000,"window":"1s"}`
	filterCalls, filterAllocs := callsPerRequest(t, ".", `{"rules":[`+rule+`]}`, 1000)
	floorCalls, floorAllocs := callsPerRequest(t, "./wasmhost/testdata/hostfloor", `{}`, 1000)
	require.Equal(t, map[string]float64{
		"env.proxy_get_header_map_pairs":        1,
		"env.proxy_get_property":                1,
		"wasi_snapshot_preview1.clock_time_get": 1,
		"env.proxy_get_shared_data":             1,
		"env.proxy_set_shared_data":             1,
		"env.proxy_increment_metric":            1,
		"env.proxy_add_header_map_value":        2,
	}, filterCalls)
	require.Equal(t, filterCalls, floorCalls)
	require.Equal(t, 3.0, filterAllocs, "the header map, the property and the slot's value")
	require.Equal(t, filterAllocs, floorAllocs)
	clientCalls, clientAllocs := callsPerRequest(t, "./wasmhost/testdata/hostfloor", `{"per_client":true}`, 1000)
	require.Equal(t, filterCalls, clientCalls, "a client seen before, per-client floor")
	require.Equal(t, filterAllocs, clientAllocs)
}

// The callout floor (wasmhost/testdata/hostfloor with {"global":true}) makes, per request,
// exactly the host calls of BenchmarkGlobalWasm's request with one global rule, callout
// included, and as many allocator calls: the difference between the two in the benchmark is
// the filter's own work for a global rule.
func TestCalloutFloorMakesTheFilterCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clusters := map[string]string{"webdis": srv.WebdisURL()}
	rule := `[{"name":"bench0","key":[{"source":"header","name":"x-user"}],"algorithm":"token_bucket","limit":1000000000,"window":"1h","scope":"global"}]`
	req := globalRequest(hdr("x-user", "bench"))
	filterCalls, filterAllocs := callsPerRequestOf(t, ".", globalConfig(redisOpts{}, rule), 200, req, true, clusters)
	floorCalls, floorAllocs := callsPerRequestOf(t, "./wasmhost/testdata/hostfloor", `{"global":true}`, 200, req, true, clusters)
	require.Equal(t, map[string]float64{
		"env.proxy_get_header_map_pairs":        1,
		"wasi_snapshot_preview1.clock_time_get": 2,
		"env.proxy_http_call":                   1,
		"env.proxy_increment_metric":            2,
		"env.proxy_set_effective_context":       1,
		"env.proxy_record_metric":               1,
		"env.proxy_get_header_map_value":        1,
		"env.proxy_get_buffer_bytes":            1,
		"env.proxy_continue_stream":             1,
		"env.proxy_add_header_map_value":        5,
	}, filterCalls)
	require.Equal(t, filterCalls, floorCalls)
	require.Equal(t, 3.0, filterAllocs, "the header map, the answer's status and its body")
	require.Equal(t, filterAllocs, floorAllocs)
}

// The host calls of requests that the benchmark's request does not show: a request no rule
// matches reads what the rule's conditions need and nothing else (no clock, no shared data);
// a rule with a header key part reads the whole header map once and answers its conditions'
// headers (:method, :path, another header) from it, with no single-header read. A cost
// header's lines are counted from the header map on a request that carries it only.
func TestHostCallsPerRequest(t *testing.T) {
	t.Parallel()
	const alg = `"algorithm":"token_bucket","limit":1000000000,"window":"1s"`
	req := benchRequest()
	req.Headers = append(req.Headers, [2]string{"x-plan", "free"})
	costed := benchRequest()
	costed.Headers = append(costed.Headers, [2]string{"x-cost", "1"})
	const costRule = `{"rules":[{"name":"r","cost":{"header":"x-cost","max":5},` + alg + `}]}`
	for _, tc := range []struct {
		name, config string
		limited      bool
		want         map[string]float64
		allocs       float64
		costed       bool // the request carries x-cost
	}{
		{"no rule matches", `{"rules":[{"name":"r","match":{"path":{"prefix":"/other"}},"key":[{"source":"client_ip"}],` + alg + `}]}`,
			false, map[string]float64{"env.proxy_get_header_map_value": 1}, 1, false},
		{"conditions from the header map", `{"rules":[{"name":"r","match":{"methods":["GET"],"path":{"prefix":"/api"},
			"headers":[{"name":"x-plan","exact":"free"}]},"key":[{"source":"header","name":"x-tenant"}],` + alg + `}]}`,
			true, map[string]float64{
				"env.proxy_get_header_map_pairs":        1,
				"wasi_snapshot_preview1.clock_time_get": 1,
				"env.proxy_get_shared_data":             1,
				"env.proxy_set_shared_data":             1,
				"env.proxy_increment_metric":            1,
				"env.proxy_add_header_map_value":        2,
			}, 2, false},
		{"a cost header the request does not carry", costRule, true, map[string]float64{
			"env.proxy_get_header_map_value":        1,
			"wasi_snapshot_preview1.clock_time_get": 1,
			"env.proxy_get_shared_data":             1,
			"env.proxy_set_shared_data":             1,
			"env.proxy_increment_metric":            1,
			"env.proxy_add_header_map_value":        2,
		}, 1, false},
		{"a cost header the request carries", costRule, true, map[string]float64{
			"env.proxy_get_header_map_value":        1,
			"env.proxy_get_header_map_pairs":        1,
			"wasi_snapshot_preview1.clock_time_get": 1,
			"env.proxy_get_shared_data":             1,
			"env.proxy_set_shared_data":             1,
			"env.proxy_increment_metric":            1,
			"env.proxy_add_header_map_value":        2,
		}, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req
			if tc.costed {
				r = costed
			}
			calls, allocs := callsPerRequestOf(t, ".", tc.config, 1000, r, tc.limited, nil)
			require.Equal(t, tc.want, calls)
			require.Equal(t, tc.allocs, allocs)
		})
	}
}
