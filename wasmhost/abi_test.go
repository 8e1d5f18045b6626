package wasmhost

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests drive testdata/abiguest, a guest written directly against the
// ABI, to pin down host behaviour that Envoy defines.

func probeResults(t *testing.T, res *Result) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, kv := range strings.Split(res.RequestHeader("x-probe"), ",") {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

func TestABIStatusCodes(t *testing.T) {
	clock := func() time.Time { return time.Unix(1700000000, 5) }
	h := newTestHost(t, abiGuest(t), Options{
		VMConfig: []byte("vmcfg"),
		Clusters: map[string]string{"echo": "http://127.0.0.1:1"},
		Clock:    clock,
		LogLevel: LogWarn,
	})
	p := probeResults(t, do(t, h, Request{Headers: [][2]string{{"x-op", "probe"}}}))
	want := map[string]string{
		"get_missing":                  "1",  // NotFound
		"get_badtype":                  "2",  // map type > 7
		"get_resp_in_req":              "2",  // response headers do not exist yet
		"get_callout_outside":          "2",  // callout headers only during the callback
		"add_resp_in_req":              "2",  //
		"size_req":                     "0",  //
		"size_callout":                 "2",  // Envoy's getMap has no callout maps
		"replace":                      "0",  //
		"replaced":                     "v2", // replace removed both added values
		"pairs":                        "0",  //
		"remove":                       "0",  //
		"get_removed":                  "1",  //
		"plugin_cfg_outside_configure": "1",  // plugin config exists only in on_configure
		"vm_cfg":                       "0",  //
		"vm_cfg_val":                   "vmcfg",
		"callout_body_outside":         "1",
		"buf_badtype":                  "2",
		"shared_missing":               "1",
		"shared_set_absent_cas":        "0", // an absent key is written whatever the cas
		"shared_set_cas0":              "0", // cas 0 is unconditional
		"shared_set_stale":             "8", // CasMismatch
		"shared_set_fresh":             "0",
		"effective_gone":               "2",
		"continue_bad":                 "2",
		"continue_upstream":            "12", // Unimplemented
		"log_badlevel":                 "2",
		"log_level":                    "3", // warn, as configured
		"time":                         "0",
		"time_val":                     "1700000000000000005",
		"http_unknown_cluster":         "2",
		"http_missing_authority":       "2",
		"get_status":                   "0",
	}
	for k, v := range want {
		assert.Equal(t, v, p[k], k)
	}
	// 4 pseudo-headers + x-op + x-forwarded-proto + x-request-id + x-upper.
	assert.Equal(t, "8", p["pairs_count"])
}

func TestRequestHeadersLikeEnvoy(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{})
	res := do(t, h, Request{Method: "POST", Path: "/a?b=c", Authority: "example.com",
		Headers: [][2]string{{"Host", "ignored"}, {"X-Mixed-Case", "v"}}, Body: []byte("x")})
	keys := make([]string, 0, len(res.RequestHeaders))
	for _, p := range res.RequestHeaders {
		keys = append(keys, p[0])
	}
	assert.Equal(t, []string{":authority", ":path", ":method", ":scheme", "x-mixed-case", "x-forwarded-proto", "x-request-id", "x-guest", "x-guest-eos"}, keys)
	assert.Equal(t, "0", res.RequestHeader("x-guest-eos"), "a body follows, so headers are not end of stream")
	assert.Len(t, res.RequestHeader("x-request-id"), 36)
}

func TestMetricsSemantics(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{Workers: 2})
	for w := 0; w < 2; w++ {
		res := do(t, h, Request{Worker: w, Headers: [][2]string{{"x-op", "metrics"}}})
		// Counters only go up, gauges may go down, histograms cannot be read.
		assert.Equal(t, "inc=0,incneg=2,gset=0,gdec=0,hrec=0,cget=0:"+fmt.Sprint(2*(w+1))+",hget=2,unknown=1", res.RequestHeader("x-metrics"))
	}
	c, _ := h.Metric("guest_counter")
	assert.EqualValues(t, 4, c, "both VMs increment the same counter")
	g, _ := h.Metric("guest_gauge")
	assert.EqualValues(t, 40, g, "a gauge record is a set")
	hist, ok := h.Histogram("guest_hist")
	require.True(t, ok)
	assert.Equal(t, []uint64{7, 7}, hist.Values)
	assert.EqualValues(t, 14, hist.Sum)
}

func TestProperties(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{PluginName: "rl", RootID: "root-1", VMID: "vm-1"})
	res := do(t, h, Request{
		Method: "PUT", Path: "/p?q=1", Authority: "a.example",
		RouteName: "route-a", VirtualHost: "vh", ClusterName: "upstream", SourceAddress: "10.1.2.3:4567",
		Headers: [][2]string{{"x-op", "props"}, {"x-request-id", "rid-1"},
			{"x-props", "xds.route_name,xds.virtual_host_name,xds.cluster_name,xds.route_metadata,source.address,source.port,request.path,request.url_path,request.method,request.id,request.host,plugin_name,plugin_root_id,plugin_vm_id,no.such,response.code"}},
	})
	want := []string{"route-a", "vh", "upstream", "", "10.1.2.3:4567", "4567", "/p?q=1", "/p", "PUT", "rid-1", "a.example", "rl", "root-1", "vm-1", "!1", "!1"}
	for i, w := range want {
		assert.Equal(t, w, res.RequestHeader(fmt.Sprintf("x-prop-%d", i)), "property %d", i)
	}
	res = do(t, h, Request{Headers: [][2]string{{"x-op", "setprop"}}})
	assert.Equal(t, "my-value/0", res.RequestHeader("x-prop"))
	// In the response phase Envoy has dropped the request headers.
	assert.Equal(t, "2", res.Header("x-req-path-status"))
}

func TestLocalResponseInResponsePhaseBypassesFilter(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{})
	res := do(t, h, Request{Headers: [][2]string{{"x-op", "resp-local"}},
		Upstream: &UpstreamResponse{Status: 200, Headers: [][2]string{{"x-up", "1"}}, Body: []byte("upstream")}})
	assert.True(t, res.Continued)
	require.NotNil(t, res.Local)
	assert.Equal(t, 418, res.Status)
	assert.Equal(t, "replaced", string(res.ResponseBody))
	assert.Equal(t, "from_response", res.Local.Details, "details have spaces replaced, as in Envoy")
	assert.Empty(t, res.Header("x-up"))
	assert.Empty(t, res.Header("x-guest-resp"), "a reply sent during encoding goes out directly")
}

func TestLocalResponseStopsWhateverGuestReturns(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{})
	res := do(t, h, Request{Headers: [][2]string{{"x-op", "local"}}})
	assert.False(t, res.Continued, "the guest returned Continue but sent a local reply")
	require.NotNil(t, res.Local)
	assert.Equal(t, 429, res.Status)
	assert.Equal(t, "denied_by_guest", res.Local.Details)
	assert.Equal(t, "denied", res.Header("x-guest"), "header keys are lower-cased")
	assert.Equal(t, "ok", res.Header("x-guest-resp"), "the reply went through proxy_on_response_headers")
}

func TestCloseStreamResets(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{})
	res := do(t, h, Request{Headers: [][2]string{{"x-op", "close"}}})
	assert.True(t, res.Reset)
	assert.False(t, res.Continued)
}

func TestRequestBodyRewrite(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{})
	res := do(t, h, Request{Method: "POST", Body: []byte("abc"), Headers: [][2]string{{"x-op", "body"}}})
	assert.True(t, res.Continued)
	assert.Equal(t, "[abc]", string(res.RequestBody), "start 0 with length = size replaces the body")
}

func TestCalloutShapes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-from") != "guest" || r.Host != "callout.test" {
			w.WriteHeader(400)
			return
		}
		w.Header().Set("Trailer", "x-trailer")
		w.WriteHeader(202)
		fmt.Fprint(w, "hello")
		w.Header().Set("x-trailer", "t")
	}))
	defer srv.Close()
	h := newTestHost(t, abiGuest(t), Options{Clusters: map[string]string{"svc": srv.URL, "reset": "reset:"}})
	res := do(t, h, Request{Headers: [][2]string{{"x-op", "callout"}, {"x-cluster", "svc"}}})
	require.True(t, res.Continued)
	assert.Equal(t, "202", res.RequestHeader("x-callout-status"))
	assert.Equal(t, "hello", res.RequestHeader("x-callout-body"))
	assert.True(t, strings.HasSuffix(res.RequestHeader("x-callout-n"), "/5/1"), res.RequestHeader("x-callout-n"))
	assert.Equal(t, "4", res.RequestHeader("x-callout-token"), "Envoy's callout tokens step by 4")
	assert.Empty(t, res.RequestHeader("x-after-continue"), "after continue the request headers are gone")

	res = do(t, h, Request{Headers: [][2]string{{"x-op", "callout"}, {"x-cluster", "reset"}}})
	require.True(t, res.Continued)
	assert.Equal(t, "0/0/0", res.RequestHeader("x-callout-n"), "a reset delivers (0, 0, 0)")
	assert.Equal(t, "11:reset", res.RequestHeader("x-callout-get-status"))
	assert.Empty(t, res.RequestHeader("x-callout-status"), "no callout headers on a reset")
}

// TestCalloutToClusterWithoutHosts: a cluster with no host fails proxy_http_call at once with
// InternalFailure (10), as Envoy's async client does, and no callback follows.
func TestCalloutToClusterWithoutHosts(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{LogLevel: LogDebug, Clusters: map[string]string{"empty": ClusterNoHosts}})
	res := do(t, h, Request{Headers: [][2]string{{"x-op", "callout"}, {"x-cluster", "empty"}}})
	require.True(t, res.Continued)
	assert.Equal(t, "10", res.RequestHeader("x-callout-error"), "InternalFailure, synchronously")
	assert.Empty(t, res.RequestHeader("x-callout-token"))
	time.Sleep(50 * time.Millisecond)
	assert.Empty(t, logsContaining(h, "callout response for unknown token"), "no callback ever comes")
}

func TestCalloutOutlivesTornDownStream(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(200)
	}))
	defer srv.Close()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	h := newTestHost(t, abiGuest(t), Options{LogLevel: LogDebug, Clusters: map[string]string{"svc": srv.URL}})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := h.Do(ctx, Request{Headers: [][2]string{{"x-op", "callout"}, {"x-cluster", "svc"}, {"x-timeout", "5000"}}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The paused stream is torn down (on_log, on_done, on_delete) ...
	require.Eventually(t, func() bool { return len(logsContaining(h, "on_delete 2")) == 1 }, 5*time.Second, 5*time.Millisecond)
	unblock()
	// ... but its callout is not cancelled: the response reaches the root
	// context, where set_effective_context on the dead stream fails.
	require.Eventually(t, func() bool {
		return len(logsContaining(h, "stream 2 is gone: set_effective_context=2 status=200")) == 1
	}, 5*time.Second, 5*time.Millisecond)
}

func TestTeardownOrder(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{LogLevel: LogDebug})
	do(t, h, Request{Path: "/x"})
	var order []string
	for _, e := range h.Logs() {
		if e.Source == SourceProxyLog {
			order = append(order, strings.Fields(e.Message)[0])
		}
	}
	assert.Equal(t, []string{"on_log", "on_done", "on_delete"}, order)
	assert.NotEmpty(t, logsContaining(h, "on_log 2 path=/x status=200"), "on_log can read request and response headers")
}

func TestLogLevelFilters(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{LogLevel: LogInfo})
	do(t, h, Request{Path: "/x"})
	assert.Empty(t, logsContaining(h, "on_log"), "debug lines are dropped at info, like ENVOY_LOG")
}

func TestStopWaitsBoundedByContext(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{LogLevel: LogDebug})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := h.Do(ctx, Request{Headers: [][2]string{{"x-op", "stop"}}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Envoy tears a reset stream down in the same worker event as the reset, so the teardown
	// has run by the time Do returns: no waiting here.
	require.Len(t, logsContaining(h, "on_log 2 "), 1, "on_log must have run when Do returns")
	require.Len(t, logsContaining(h, "on_delete 2"), 1, "on_delete must have run when Do returns")
}

func TestSharedQueue(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{Workers: 2, PluginConfig: []byte("queue=q1")})
	res := do(t, h, Request{Worker: 0, Headers: [][2]string{{"x-op", "enqueue"}, {"x-data", "item-1"}}})
	assert.Equal(t, "0", res.RequestHeader("x-enqueue"))
	require.Eventually(t, func() bool { return len(logsContaining(h, "queue item: item-1")) == 1 }, 5*time.Second, 5*time.Millisecond)
}

func TestPollOneoffModes(t *testing.T) {
	sleepInit := map[string]string{"GUEST_SLEEP_IN_INIT": "20"}
	// Envoy >= 1.39: poll_oneoff returns 0 events, the Go scheduler spins
	// until its timer expires, and time.Sleep works (burning CPU).
	require.NoError(t, newErr(t, abiGuest(t), Options{PollOneoff: PollOneoffEnvoy139, Env: sleepInit}))
	h := newTestHost(t, abiGuest(t), Options{PollOneoff: PollOneoffEnvoy139})
	start := time.Now()
	res := do(t, h, Request{Headers: [][2]string{{"x-op", "sleep"}, {"x-ms", "30"}}})
	assert.Equal(t, "30", res.RequestHeader("x-slept"))
	assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)

	// Envoy <= 1.38: ENOSYS, the Go runtime throws "poll_oneoff failed" and
	// traps. During _initialize that refuses the module ...
	err := newErr(t, abiGuest(t), Options{PollOneoff: PollOneoffEnvoy138, Env: sleepInit})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "_initialize trapped")
	assert.Contains(t, err.Error(), "poll_oneoff failed")
	// ... and in a callback it fails the VM (503 wasm_fail_stream).
	h = newTestHost(t, abiGuest(t), Options{PollOneoff: PollOneoffEnvoy138})
	res = do(t, h, Request{Headers: [][2]string{{"x-op", "sleep"}, {"x-ms", "30"}}})
	assert.Equal(t, 503, res.Status)
	assert.True(t, h.VMFailed(0))
	assert.NotEmpty(t, logsContaining(h, "poll_oneoff failed"))
}

// The Go runtime sleeps (poll_oneoff) when a collection starts inside the allocator, which
// happens whenever the host asks for memory at the wrong moment. Envoy 1.39 allows poll_oneoff
// there (proxy-wasm-cpp-host #533); up to 1.38 it is a restricted call and traps.
func TestPollOneoffDuringTheAllocator(t *testing.T) {
	env := map[string]string{"GUEST_SLEEP_IN_ALLOC": "1"}
	incr := Request{Headers: [][2]string{{"x-op", "shared-incr"}, {"x-key", "k"}}}
	h := newTestHost(t, abiGuest(t), Options{PollOneoff: PollOneoffEnvoy139, Env: env})
	do(t, h, incr)
	res := do(t, h, incr) // the second read returns a value: the host calls the allocator
	assert.Equal(t, "2", res.RequestHeader("x-count"))
	assert.Zero(t, h.Stats().Traps)

	h = newTestHost(t, abiGuest(t), Options{PollOneoff: PollOneoffEnvoy138, Env: env})
	do(t, h, incr)
	res = do(t, h, incr)
	assert.Equal(t, 503, res.Status)
	assert.NotEmpty(t, logsContaining(h, "poll_oneoff is not allowed during the allocator"))
}

func TestRestrictedCallFromGoInit(t *testing.T) {
	err := newErr(t, abiGuest(t), Options{Env: map[string]string{"GUEST_RESTRICTED_IN_INIT": "1"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "env.proxy_get_shared_data is not allowed during _initialize")
	// proxy_log and environ_get are allowed.
	h := newTestHost(t, abiGuest(t), Options{Env: map[string]string{"GUEST_LOG_IN_INIT": "hello"}})
	assert.Len(t, logsContaining(h, "init: hello"), 2, "the canary and the worker both run _initialize")
}

func TestWatchdogTrapsLongCall(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{CallTimeout: 100 * time.Millisecond})
	res := do(t, h, Request{Headers: [][2]string{{"x-op", "sleep"}, {"x-ms", "5000"}}})
	assert.Equal(t, 503, res.Status)
	assert.True(t, h.VMFailed(0))
	assert.NotEmpty(t, logsContaining(h, "exceeded CallTimeout"))
}

func TestCloseTearsDownPausedStreams(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{LogLevel: LogDebug})
	errc := make(chan error, 1)
	go func() {
		_, err := h.Do(context.Background(), Request{Headers: [][2]string{{"x-op", "stop"}}})
		errc <- err
	}()
	require.Eventually(t, func() bool { return len(h.vms[0].tasks) == 0 && pausedStreams(h) == 1 }, 5*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.Close(ctx))
	require.ErrorIs(t, <-errc, ErrClosed)
	assert.Len(t, logsContaining(h, "on_delete 2"), 1)
	_, err := h.Do(ctx, Request{})
	assert.ErrorIs(t, err, ErrClosed)
}

// pausedStreams counts open streams on worker 0 (read on its loop).
func pausedStreams(h *Host) int {
	n := make(chan int, 1)
	if !h.vms[0].post(context.Background(), func() { n <- len(h.vms[0].streams) }) {
		return -1
	}
	return <-n
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	defer srv.Close()
	h, err := New(context.Background(), abiGuest(t), Options{Workers: 3, SharedData: NewSharedData(),
		PluginConfig: []byte("tick=5"), Clusters: map[string]string{"svc": srv.URL}})
	require.NoError(t, err)
	for i := 0; i < 6; i++ {
		do(t, h, Request{Worker: -1, Headers: [][2]string{{"x-op", "callout"}, {"x-cluster", "svc"}}})
	}
	// Leave one stream paused: Close must tear it down and release its Do.
	errc := make(chan error, 1)
	go func() {
		_, err := h.Do(context.Background(), Request{Worker: 0, Headers: [][2]string{{"x-op", "stop"}}})
		errc <- err
	}()
	require.Eventually(t, func() bool { return pausedStreams(h) == 1 }, 5*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, h.Close(ctx))
	require.ErrorIs(t, <-errc, ErrClosed)
	// No goroutine of the host (VM loops, callouts, timers, watchdog) and no
	// client connection of its transport may survive Close.
	leaked := func() string {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var out []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "wasmhost.(*") || strings.Contains(g, "net/http.(*persistConn)") {
				out = append(out, g)
			}
		}
		return strings.Join(out, "\n\n")
	}
	require.Eventually(t, func() bool { return leaked() == "" }, 5*time.Second, 10*time.Millisecond, "leaked:\n%s", leaked())
}

func TestTrapInCalloutResponseFailsPausedStream(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{Clusters: map[string]string{"reset": "reset:"}})
	res := do(t, h, Request{Headers: [][2]string{{"x-op", "callout-panic"}, {"x-cluster", "reset"}}})
	assert.Equal(t, 503, res.Status)
	assert.Equal(t, "wasm_fail_stream", res.Local.Details)
	assert.True(t, h.VMFailed(0))
	assert.NotEmpty(t, logsContaining(h, "wasm trap in proxy_on_http_call_response"))
}
