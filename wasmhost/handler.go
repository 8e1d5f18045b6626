package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// hopByHop headers are connection-specific and never forwarded.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true,
	"transfer-encoding": true, "upgrade": true, "content-length": true, "host": true,
}

// Handler returns a reverse proxy that behaves like an Envoy listener with
// this filter: each request runs through the filter on a worker VM (round
// robin); a local response is written as-is; otherwise the request, as the
// filter left it, is forwarded to upstream and the upstream's response goes
// through the response callbacks. A stream closed by the guest aborts the
// connection. The route table in Options supplies the xds.* properties.
func (h *Host) Handler(upstream *url.URL) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := RouteTarget{Upstream: upstream}
		if rt := h.matchRoute(r.URL.Path); rt != nil {
			t.Route = *rt
		}
		h.ServeRoute(w, r, t)
	})
}

// RouteTarget is what Envoy's connection manager knows about a request once
// its route is chosen: the route's xds.* properties, where the router sends
// the request, and whether this filter runs on the route at all.
type RouteTarget struct {
	// Route supplies xds.route_name, xds.virtual_host_name, xds.cluster_name
	// and xds.route_metadata (PathPrefix is not used). The zero value is "no
	// route matched": the filter still runs, and the router answers Direct.
	Route Route
	// Path is the :path the filter and the upstream see (Envoy normalises it
	// before routing); empty means the request target as received.
	Path string
	// Upstream is the cluster's base URL the router forwards to.
	Upstream *url.URL
	// Timeout is the route timeout; 0 uses Options.UpstreamTimeout.
	Timeout time.Duration
	// Direct, when set, is the router's own answer instead of forwarding
	// (a direct_response route, or Envoy's 404 when no route matched). It
	// still passes through the filter's response callbacks.
	Direct *UpstreamResponse
	// FilterDisabled skips the filter, as a per-route
	// envoy.config.route.v3.FilterConfig{disabled: true} does: the request
	// goes straight to the router.
	FilterDisabled bool
	// OnResult, when set, is called with what happened to the stream before the response is
	// written (an access log reads the filter state and the upstream request from it). It is
	// not called when the filter could not run the stream.
	OnResult func(*Result)
}

// ServeRoute serves one downstream request the way Envoy does once the
// route is chosen: the filter (unless disabled on the route), then the
// router, which forwards to t.Upstream or answers t.Direct. The response,
// after the filter's response callbacks, is written to w.
func (h *Host) ServeRoute(w http.ResponseWriter, r *http.Request, t RouteTarget) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		http.Error(w, "payload too large", http.StatusRequestEntityTooLarge)
		return
	}
	req := Request{
		Worker:        -1,
		Method:        r.Method,
		Path:          t.Path,
		Authority:     r.Host,
		Scheme:        "http",
		Body:          body,
		SourceAddress: r.RemoteAddr,
	}
	if req.Path == "" {
		req.Path = r.URL.RequestURI()
	}
	if r.TLS != nil {
		req.Scheme = "https"
	}
	req.Headers = headerPairs(r.Header)
	rt := t.Route
	req.RouteName, req.VirtualHost, req.ClusterName, req.RouteMetadata = rt.Name, rt.VirtualHost, rt.Cluster, rt.RouteMetadata
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = h.opts.UpstreamTimeout
	}
	router := func(ctx context.Context, rq *Result) (*UpstreamResponse, error) {
		if t.Direct != nil {
			d := *t.Direct
			return &d, nil
		}
		if t.Upstream == nil {
			return routerReply(503, "no healthy upstream"), nil
		}
		return h.forward(ctx, t.Upstream, rq, timeout), nil
	}

	var res *Result
	if t.FilterDisabled {
		// The connection manager still adds what it always adds; then the
		// router runs at once.
		rq := &Result{Continued: true, RequestHeaders: requestHeaders(&req).kv, RequestBody: body}
		up, _ := router(r.Context(), rq)
		res = &Result{Continued: true, RequestHeaders: rq.RequestHeaders, Status: up.Status, ResponseHeaders: up.Headers, ResponseBody: up.wholeBody()}
	} else {
		res, err = h.run(r.Context(), &req, router, &responseSink{w: w})
		if err != nil {
			if r.Context().Err() != nil {
				return // the client went away
			}
			http.Error(w, "wasmhost: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	if t.OnResult != nil {
		t.OnResult(res)
	}
	if res.Reset {
		// Aborting the handler is net/http's way to reset the stream.
		panic(http.ErrAbortHandler)
	}
	if res.StreamedHeaders {
		// A live body: the headers and the body so far went out as the filter passed them.
		if res.Truncated {
			panic(http.ErrAbortHandler)
		}
		_, _ = w.Write(res.ResponseBody[res.StreamedBytes:])
		return
	}
	addResponseHeaders(w, res.ResponseHeaders)
	w.Header().Set("Content-Length", strconv.Itoa(len(res.ResponseBody)))
	w.WriteHeader(res.Status)
	_, _ = w.Write(res.ResponseBody)
}

// addResponseHeaders adds a response's headers to w, but for pseudo-headers and hop-by-hop
// ones.
func addResponseHeaders(w http.ResponseWriter, headers [][2]string) {
	for _, p := range headers {
		if strings.HasPrefix(p[0], ":") || hopByHop[p[0]] {
			continue
		}
		w.Header().Add(p[0], p[1])
	}
}

// responseSink writes a response with a live body to the client as the filter passes it
// (see UpstreamResponse.Live), flushing each piece.
type responseSink struct{ w http.ResponseWriter }

func (d *responseSink) pass(status int, headers [][2]string, body []byte) {
	if headers != nil {
		addResponseHeaders(d.w, headers)
		d.w.WriteHeader(status)
	}
	if len(body) > 0 {
		_, _ = d.w.Write(body)
	}
	if f, ok := d.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (h *Host) matchRoute(path string) *Route {
	for i := range h.opts.Routes {
		if strings.HasPrefix(path, h.opts.Routes[i].PathPrefix) {
			return &h.opts.Routes[i]
		}
	}
	return nil
}

// forward sends the filtered request upstream. Failures become the response
// Envoy's router would send (503/504), which still passes through the
// filter's response callbacks because the router comes after the filter.
func (h *Host) forward(ctx context.Context, upstream *url.URL, rq *Result, timeout time.Duration) *UpstreamResponse {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	live := false // a live body owns cancel (see forwardStream)
	defer func() {
		if !live {
			cancel()
		}
	}()
	req, err := outgoingRequest(ctx, upstream.String(), rq.RequestHeaders, rq.RequestBody, hopByHop)
	if err != nil {
		return routerReply(503, fmt.Sprintf("upstream connect error or disconnect/reset before headers. reset reason: %v", err))
	}
	start := time.Now()
	resp, err := h.transport.RoundTrip(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return routerReply(504, "upstream request timeout")
		}
		return routerReply(503, "upstream connect error or disconnect/reset before headers. reset reason: connection failure")
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		live = true
		return forwardStream(resp, start, cancel)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, h.opts.MaxBodyBytes+1))
	if err != nil {
		return routerReply(503, "upstream connect error or disconnect/reset before headers. reset reason: connection termination")
	}
	if int64(len(body)) > h.opts.MaxBodyBytes {
		// This host buffers every response. Envoy, when a response it must buffer exceeds its
		// limit before the headers went out, answers 500 (response_payload_too_large); a
		// silently truncated body would be worse than either.
		return routerReply(500, "Internal Server Error")
	}
	out := &UpstreamResponse{Status: resp.StatusCode, Body: body, Headers: headerPairs(resp.Header)}
	out.Headers = append(out.Headers, [2]string{"x-envoy-upstream-service-time", strconv.FormatInt(time.Since(start).Milliseconds(), 10)})
	out.Trailers = headerPairs(resp.Trailer)
	return out
}

// forwardStream is forward for an event stream: its body is live (UpstreamResponse.Live),
// handed to the filter as the upstream writes it and to the client as the filter passes it,
// as Envoy streams it. Closing the body ends the upstream request (cancel).
func forwardStream(resp *http.Response, start time.Time, cancel context.CancelFunc) *UpstreamResponse {
	out := &UpstreamResponse{Status: resp.StatusCode, Headers: headerPairs(resp.Header),
		Live: &liveBody{ReadCloser: resp.Body, cancel: cancel}}
	out.Headers = append(out.Headers, [2]string{"x-envoy-upstream-service-time", strconv.FormatInt(time.Since(start).Milliseconds(), 10)})
	return out
}

// liveBody is an upstream's live body, whose Close also ends its request's context.
type liveBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *liveBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// headerPairs flattens an http.Header into pairs with lower-cased names (as Envoy's codecs
// deliver them), sorted by name: net/http keeps no wire order to reproduce, and a stable order
// keeps results comparable from run to run.
func headerPairs(h http.Header) [][2]string { return appendHeaderPairs(nil, h) }

// appendHeaderPairs appends headerPairs(h) to out. Every callout's answer passes through here,
// so the names are lower-cased into one string cut into one per name, and out grows once. The
// names are ASCII (net/http's parser takes no other), so lower-casing A-Z is all it takes.
func appendHeaderPairs(out [][2]string, h http.Header) [][2]string {
	if len(h) == 0 {
		return out
	}
	keys := make([]string, 0, len(h))
	n, size := 0, 0
	for k, vs := range h {
		keys = append(keys, k)
		n, size = n+len(vs), size+len(k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(size)
	for _, k := range keys {
		for i := 0; i < len(k); i++ {
			c := k[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b.WriteByte(c)
		}
	}
	names := b.String()
	out = slices.Grow(out, n)
	for _, k := range keys {
		lk := names[:len(k)]
		names = names[len(k):]
		for _, v := range h[k] {
			out = append(out, [2]string{lk, v})
		}
	}
	return out
}

// outgoingRequest builds the request Envoy sends for a header map, a callout's or a forwarded
// request's: :method, :path and :authority make the request line and Host, the other
// pseudo-headers and the dropped ones do not go out, and the length is the body's.
func outgoingRequest(ctx context.Context, base string, headers [][2]string, body []byte, dropped map[string]bool) (*http.Request, error) {
	path := headerValue(headers, ":path")
	req, err := http.NewRequestWithContext(ctx, headerValue(headers, ":method"), strings.TrimSuffix(base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Host = headerValue(headers, ":authority")
	for _, p := range headers {
		if strings.HasPrefix(p[0], ":") || dropped[p[0]] {
			continue
		}
		req.Header.Add(p[0], p[1])
	}
	req.ContentLength = int64(len(body))
	noDefaultUserAgent(req.Header)
	return req, nil
}

// routerReply is an answer of Envoy's router itself (no healthy upstream, timeout...), with
// the headers Envoy gives a local reply.
func routerReply(status int, body string) *UpstreamResponse {
	return &UpstreamResponse{
		Status:  status,
		Headers: [][2]string{{"content-length", strconv.Itoa(len(body))}, {"content-type", "text/plain"}},
		Body:    []byte(body),
	}
}
