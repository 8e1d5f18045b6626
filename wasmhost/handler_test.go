package wasmhost

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoUpstream answers with the request it received, one "key: value" line
// per header, and sets x-upstream: 1.
func echoUpstream(t *testing.T) *url.URL {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("x-upstream", "1")
		var b strings.Builder
		b.WriteString(r.Method + " " + r.URL.RequestURI() + " host=" + r.Host + "\n")
		for k, vs := range r.Header {
			for _, v := range vs {
				b.WriteString(strings.ToLower(k) + ": " + v + "\n")
			}
		}
		b.WriteString("body=" + string(body) + "\n")
		_, _ = io.WriteString(w, b.String())
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u
}

func get(t *testing.T, client *http.Client, u string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestHandlerProxiesThroughPlaceholder(t *testing.T) {
	h := newTestHost(t, wasmtest.BuildGuest(t, placeholderModule), Options{Workers: 2, VMID: "handler-test"})
	proxy := httptest.NewServer(h.Handler(echoUpstream(t)))
	defer proxy.Close()

	resp, body := get(t, proxy.Client(), proxy.URL+"/hello?x=1")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "ok", resp.Header.Get("x-placeholder"))
	assert.Equal(t, "1", resp.Header.Get("x-upstream"))
	assert.Contains(t, body, "GET /hello?x=1 host="+strings.TrimPrefix(proxy.URL, "http://"))
	assert.Contains(t, body, "x-request-count: 1", "the filter's request header reached the upstream")
	assert.Contains(t, body, "x-request-id: ")

	resp, body = get(t, proxy.Client(), proxy.URL+"/deny")
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "denied\n", body)
	assert.Equal(t, []string{"denied", "ok"}, resp.Header.Values("x-placeholder"))
	assert.Empty(t, resp.Header.Get("x-upstream"), "a local reply never reaches the upstream")
}

func TestHandlerRoutesAndReset(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{Routes: []Route{
		{PathPrefix: "/api/", Name: "api", VirtualHost: "vh", Cluster: "backend"},
		{PathPrefix: "/", Name: "default"},
	}})
	proxy := httptest.NewServer(h.Handler(echoUpstream(t)))
	defer proxy.Close()
	_, body := get(t, proxy.Client(), proxy.URL+"/api/x", "x-op", "props", "x-props", "xds.route_name,xds.virtual_host_name,xds.cluster_name,source.address")
	assert.Contains(t, body, "x-prop-0: api\n")
	assert.Contains(t, body, "x-prop-1: vh\n")
	assert.Contains(t, body, "x-prop-2: backend\n")
	assert.Contains(t, body, "x-prop-3: 127.0.0.1:")
	_, body = get(t, proxy.Client(), proxy.URL+"/other", "x-op", "props", "x-props", "xds.route_name")
	assert.Contains(t, body, "x-prop-0: default\n")

	req, _ := http.NewRequest("GET", proxy.URL+"/", nil)
	req.Header.Set("x-op", "close")
	_, err := proxy.Client().Do(req)
	assert.Error(t, err, "proxy_close_stream resets the downstream")
}

func TestHandlerUpstreamDown(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{})
	dead, _ := url.Parse("http://127.0.0.1:1")
	proxy := httptest.NewServer(h.Handler(dead))
	defer proxy.Close()
	resp, body := get(t, proxy.Client(), proxy.URL+"/")
	assert.Equal(t, 503, resp.StatusCode)
	assert.Contains(t, body, "upstream connect error")
	assert.Equal(t, "ok", resp.Header.Get("x-guest-resp"), "the router's 503 passes through the filter")
}

// The Handler buffers whole bodies. A response larger than MaxBodyBytes must not reach the
// client cut short with a Content-Length that hides the cut: it is a 500, as Envoy answers a
// response too large to buffer, and it still passes through the filter's response side.
func TestHandlerResponseOverBodyLimit(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{MaxBodyBytes: 16})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 17))
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	proxy := httptest.NewServer(h.Handler(u))
	defer proxy.Close()
	resp, body := get(t, proxy.Client(), proxy.URL+"/")
	assert.Equal(t, 500, resp.StatusCode)
	assert.Equal(t, "Internal Server Error", body)
	assert.Equal(t, "ok", resp.Header.Get("x-guest-resp"))

	// At the limit the body passes whole.
	h2 := newTestHost(t, abiGuest(t), Options{MaxBodyBytes: 17})
	proxy2 := httptest.NewServer(h2.Handler(u))
	defer proxy2.Close()
	resp, body = get(t, proxy2.Client(), proxy2.URL+"/")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, strings.Repeat("x", 17), body)
}

// An upstream's text/event-stream passes through the filter to the client as it is written:
// the client reads the first event while the upstream still holds the second back, and a
// client that goes away mid-stream ends the upstream request.
func TestHandlerStreamsEventStreams(t *testing.T) {
	release := make(chan struct{})
	upstreamDone := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(upstreamDone)
		w.Header().Set("content-type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
			_, _ = io.WriteString(w, "data: two\n\n")
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	h := newTestHost(t, wasmtest.BuildGuest(t, placeholderModule), Options{Workers: 1, VMID: "handler-stream"})
	proxy := httptest.NewServer(h.Handler(u))
	defer proxy.Close()

	resp, err := proxy.Client().Get(proxy.URL + "/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "ok", resp.Header.Get("x-placeholder"), "the headers went through the filter")
	first := make([]byte, len("data: one\n\n"))
	_, err = io.ReadFull(resp.Body, first)
	require.NoError(t, err)
	assert.Equal(t, "data: one\n\n", string(first), "the first event arrives before the upstream wrote the second")
	close(release)
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "data: two\n\n", string(rest))
	<-upstreamDone

	// A client that goes away mid-stream.
	release2 := make(chan struct{})
	defer close(release2)
	upstreamDone = make(chan struct{})
	release = release2
	resp, err = proxy.Client().Get(proxy.URL + "/events")
	require.NoError(t, err)
	_, err = io.ReadFull(resp.Body, first)
	require.NoError(t, err)
	resp.Body.Close()
	proxy.CloseClientConnections()
	<-upstreamDone // the upstream saw its request end
}
