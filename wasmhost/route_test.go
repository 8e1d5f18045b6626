package wasmhost

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServeRoute(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{})
	up := echoUpstream(t)
	var target RouteTarget
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeRoute(w, r, target)
	}))
	defer proxy.Close()

	// The route's properties reach the filter, and the normalised path both the filter and
	// the upstream.
	target = RouteTarget{
		Route:    Route{Name: "api", VirtualHost: "vh", Cluster: "backend"},
		Path:     "/api/x?q=1",
		Upstream: up,
	}
	resp, body := get(t, proxy.Client(), proxy.URL+"/api/../api/x?q=1", "x-op", "props", "x-props", "xds.route_name,xds.virtual_host_name,xds.cluster_name,request.path")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "ok", resp.Header.Get("x-guest-resp"))
	assert.Contains(t, body, "GET /api/x?q=1 host=")
	for _, want := range []string{"x-prop-0: api\n", "x-prop-1: vh\n", "x-prop-2: backend\n", "x-prop-3: /api/x?q=1\n"} {
		assert.Contains(t, body, want)
	}

	// A disabled filter does not run at all, and the request still gets what the connection
	// manager adds.
	target = RouteTarget{Route: Route{Name: "internal"}, Upstream: up, FilterDisabled: true}
	resp, body = get(t, proxy.Client(), proxy.URL+"/internal", "x-op", "local")
	assert.Equal(t, 200, resp.StatusCode, "x-op local would have made the guest answer")
	assert.Empty(t, resp.Header.Get("x-guest-resp"))
	assert.Equal(t, "1", resp.Header.Get("x-upstream"))
	assert.Contains(t, body, "x-request-id: ")
	assert.Contains(t, body, "x-forwarded-proto: http")
	assert.NotEmpty(t, resp.Header.Get("x-envoy-upstream-service-time"))

	// A direct response (or no route: Envoy's 404) passes through the filter's response side.
	target = RouteTarget{Direct: &UpstreamResponse{Status: 404}}
	resp, body = get(t, proxy.Client(), proxy.URL+"/nowhere")
	assert.Equal(t, 404, resp.StatusCode)
	assert.Equal(t, "", body)
	assert.Equal(t, "ok", resp.Header.Get("x-guest-resp"))

	// No upstream and no direct answer: the router has no healthy host.
	target = RouteTarget{Route: Route{Name: "x"}}
	resp, body = get(t, proxy.Client(), proxy.URL+"/x")
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, "no healthy upstream", body)
}

func TestMetricStoreSharedAndPrometheus(t *testing.T) {
	store := NewMetricStore()
	a := newTestHost(t, abiGuest(t), Options{VMID: "m-a", MetricStore: store})
	b := newTestHost(t, abiGuest(t), Options{VMID: "m-b", MetricStore: store})
	require.Same(t, store.m, a.MetricStore().m)
	do(t, a, Request{Worker: -1, Headers: [][2]string{{"x-op", "metrics"}}})
	do(t, b, Request{Worker: -1, Headers: [][2]string{{"x-op", "metrics"}}})
	// Both Hosts model one Envoy process: the same name is the same stat.
	v, ok := a.Metric("guest_counter")
	require.True(t, ok)
	assert.EqualValues(t, 4, v)
	hs, _ := b.Histogram("guest_hist")
	assert.EqualValues(t, 2, hs.Count)

	var out strings.Builder
	require.NoError(t, store.WritePrometheus(&out))
	text := out.String()
	for _, want := range []string{
		"# TYPE guest_counter counter\nguest_counter{} 4\n",
		"# TYPE guest_gauge gauge\nguest_gauge{} 40\n",
		"# TYPE guest_hist histogram\n",
		"guest_hist_bucket{le=\"0.5\"} 0\n",
		"guest_hist_bucket{le=\"5\"} 0\n",
		"guest_hist_bucket{le=\"10\"} 2\n",
		"guest_hist_bucket{le=\"3600000\"} 2\n",
		"guest_hist_bucket{le=\"+Inf\"} 2\nguest_hist_sum{} 14\nguest_hist_count{} 2\n",
	} {
		assert.Contains(t, text, want)
	}
	// Families are sorted by name, as in Envoy's output.
	assert.Less(t, strings.Index(text, "guest_counter"), strings.Index(text, "guest_gauge"))
	assert.Less(t, strings.Index(text, "guest_gauge"), strings.Index(text, "guest_hist"))
}

func TestHistogramBuckets(t *testing.T) {
	m := newMetrics()
	id, _ := m.define(MetricHistogram, "h")
	for _, v := range []uint64{0, 1, 2, 5, 6, 3600000, 3600001} {
		require.Equal(t, StatusOK, m.record(id, v))
	}
	s := m.lookup(id).snapshot()
	assert.EqualValues(t, 7, s.Count)
	// <=0.5: {0}; <=1: {0,1}; <=5: {0,1,2,5}; <=10: +6; ... <=3600000: all but the last.
	assert.Equal(t, []uint64{1, 2, 4, 5}, s.Buckets[:4])
	assert.EqualValues(t, 6, s.Buckets[len(s.Buckets)-1])
}
