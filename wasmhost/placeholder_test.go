package wasmhost

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run the placeholder filter, compiled from placeholderModule, through the host:
// its behaviour is simple enough that every result can be predicted exactly.

func placeholderHost(t *testing.T, workers int, clusters map[string]string, cfg string) *Host {
	t.Helper()
	return newTestHost(t, wasmtest.BuildGuest(t, placeholderModule), Options{
		Workers:      workers,
		VMID:         "placeholder-test",
		PluginConfig: []byte(cfg),
		Clusters:     clusters,
	})
}

func allValues(h [][2]string, key string) []string {
	var out []string
	for _, p := range h {
		if p[0] == key {
			out = append(out, p[1])
		}
	}
	return out
}

func TestPlaceholderAddsHeaders(t *testing.T) {
	h := placeholderHost(t, 1, nil, "")
	for i := 1; i <= 3; i++ {
		res := do(t, h, Request{Worker: -1, Path: "/anything"})
		require.True(t, res.Continued)
		assert.Equal(t, strconv.Itoa(i), res.RequestHeader("x-request-count"))
		assert.Equal(t, 200, res.Status)
		assert.Equal(t, "ok", res.Header("x-placeholder"))
	}
	v, _, st := h.GetSharedData("placeholder.requests")
	require.Equal(t, StatusOK, st)
	assert.Equal(t, "3", string(v))
	n, ok := h.Metric("placeholder_requests_total")
	require.True(t, ok)
	assert.EqualValues(t, 3, n)
	assert.Empty(t, h.Stats().FailedVMs)
}

func TestPlaceholderDenyLocalResponse(t *testing.T) {
	h := placeholderHost(t, 1, nil, "")
	res := do(t, h, Request{Worker: -1, Path: "/deny"})
	require.False(t, res.Continued)
	require.NotNil(t, res.Local)
	assert.Equal(t, 429, res.Local.Status)
	assert.Equal(t, 429, res.Status)
	assert.Equal(t, "denied\n", string(res.ResponseBody))
	assert.Equal(t, [][2]string{{"x-placeholder", "denied"}}, res.Local.Headers)
	// Envoy passes a local reply sent while decoding through the encoder
	// filters, this one included: proxy_on_response_headers runs on it and
	// the placeholder's "ok" is added next to "denied".
	assert.Equal(t, []string{"denied", "ok"}, allValues(res.ResponseHeaders, "x-placeholder"))
	assert.Equal(t, "text/plain", res.Header("content-type"))
	assert.Equal(t, "7", res.Header("content-length"))
}

func TestPlaceholderCalloutResumes(t *testing.T) {
	var gotHost, gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHost, gotPath = r.Host, r.URL.Path
		w.WriteHeader(201)
		fmt.Fprint(w, "created")
	}))
	defer srv.Close()
	h := placeholderHost(t, 2, map[string]string{"backend": srv.URL}, `{"cluster":"backend","authority":"backend.internal"}`)
	for w := 0; w < 2; w++ {
		res := do(t, h, Request{Worker: w, Path: "/callout"})
		require.True(t, res.Continued, "the request continues after the callout")
		assert.Equal(t, "201", res.RequestHeader("x-callout-status"))
		assert.Equal(t, "ok", res.Header("x-placeholder"))
	}
	assert.Equal(t, "backend.internal", gotHost)
	assert.Equal(t, "/", gotPath)
}

func TestPlaceholderCalloutDeadAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + l.Addr().String()
	l.Close()
	h := placeholderHost(t, 1, map[string]string{"backend": dead}, `{"cluster":"backend"}`)
	res := do(t, h, Request{Worker: -1, Path: "/callout"})
	// Envoy answers a connect failure with an ordinary 503 response to the
	// callout, not a failure callback: the filter sees :status 503.
	require.True(t, res.Continued)
	assert.Equal(t, "503", res.RequestHeader("x-callout-status"))
}

func TestPlaceholderCalloutTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	h := placeholderHost(t, 1, map[string]string{"backend": srv.URL}, `{"cluster":"backend"}`)
	start := time.Now()
	res := do(t, h, Request{Worker: -1, Path: "/callout"})
	require.True(t, res.Continued)
	assert.Equal(t, "504", res.RequestHeader("x-callout-status"), "a callout timeout is an ordinary 504 response")
	assert.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond)
}

func TestPlaceholderCalloutReset(t *testing.T) {
	h := placeholderHost(t, 1, map[string]string{"backend": "reset:"}, `{"cluster":"backend"}`)
	res := do(t, h, Request{Worker: -1, Path: "/callout"})
	require.NotNil(t, res.Local)
	assert.Equal(t, 503, res.Local.Status)
	assert.Equal(t, [][2]string{{"x-placeholder", "callout-reset"}}, res.Local.Headers)
}

func TestPlaceholderCalloutUnknownCluster(t *testing.T) {
	h := placeholderHost(t, 1, nil, `{"cluster":"nope"}`)
	res := do(t, h, Request{Worker: -1, Path: "/callout"})
	require.NotNil(t, res.Local)
	assert.Equal(t, 503, res.Local.Status)
	assert.Equal(t, "callout failed\n", string(res.ResponseBody))
	assert.NotEmpty(t, logsContaining(h, "callout"))
}

func TestPlaceholderTicksOnEveryWorker(t *testing.T) {
	h := placeholderHost(t, 3, nil, "")
	require.Eventually(t, func() bool {
		for _, n := range h.Stats().Ticks {
			if n < 2 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "every worker VM ticks on its own loop")
	// Stop the ticks (Close) before comparing the three views.
	require.NoError(t, h.Close(context.Background()))
	var total int64
	for _, n := range h.Stats().Ticks {
		total += n
	}
	m, _ := h.Metric("placeholder_ticks_total")
	assert.Equal(t, total, m, "the counter is process-wide: every VM increments the same one")
	v, _, st := h.GetSharedData("placeholder.ticks")
	require.Equal(t, StatusOK, st)
	got, _ := strconv.ParseInt(string(v), 10, 64)
	// The VMs' first ticks fire together while the key does not exist yet. A
	// creator that wrote with cas 0 would overwrite another's value (Envoy
	// treats cas 0 as unconditional); the guest creates with a non-zero cas,
	// so the losers retry and no tick is lost.
	assert.Equal(t, total, got)
}

func TestPlaceholderCASAcrossWorkers(t *testing.T) {
	h := placeholderHost(t, 4, nil, "")
	const n = 400
	// Every request, the very first ones included, races for the key: its
	// creation must be a compare-and-swap too (see TestPlaceholderTicksOnEveryWorker).
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := h.Do(ctx, Request{Worker: -1, Path: "/count"})
			if err == nil && res.RequestHeader("x-request-count") == "" {
				err = fmt.Errorf("no x-request-count header")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	v, _, _ := h.GetSharedData("placeholder.requests")
	assert.Equal(t, strconv.Itoa(n), string(v), "no update lost across 4 VMs")
	m, _ := h.Metric("placeholder_requests_total")
	assert.EqualValues(t, n, m)
	assert.Empty(t, logsContaining(h, "attempts exhausted"))
}

func TestPlaceholderRecoveredPanicKeepsVM(t *testing.T) {
	h := placeholderHost(t, 1, nil, "")
	res := do(t, h, Request{Worker: 0, Path: "/p", Headers: [][2]string{{"x-panic", "1"}}})
	require.True(t, res.Continued, "the guest recovers and returns Continue")
	assert.Nil(t, res.Local)
	assert.False(t, res.Failed)
	assert.False(t, h.VMFailed(0))
	assert.Zero(t, h.Stats().Traps)
	var errLogs []LogEntry
	for _, e := range logsContaining(h, "panic") {
		if e.Level >= LogError && e.Source == SourceProxyLog {
			errLogs = append(errLogs, e)
		}
	}
	assert.NotEmpty(t, errLogs, "the recovered panic is logged at error level")
	res = do(t, h, Request{Worker: 0, Path: "/next"})
	assert.True(t, res.Continued)
	assert.Equal(t, "1", res.RequestHeader("x-request-count"))
}

// placeholderModule is the placeholder filter's own main package: the host's tests run against
// it because its behaviour is trivial to predict. The rate limiter is tested against this host
// in the filter and e2e packages.
const placeholderModule = "./wasmhost/placeholder/module"
