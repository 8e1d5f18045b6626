// Package filtertest holds the filter's user-visible scenarios as data, so that one definition
// runs natively (package filter, through the proxy-wasm SDK's proxytest emulator) and against
// the compiled module (wasmhost/moduletest, in the wazero host).
// It depends on the standard library and the product's own packages alone (no test framework),
// so the product module gains no dependency from it, and only tests import it.
package filtertest

import (
	"strings"
	"testing"
	"time"
)

// A Scenario is a configuration and a sequence of requests at fixed instants, each with the
// outcome a user would see.
type Scenario struct {
	Name   string
	Config string
	Steps  []Step
}

// Step is one request. At is the time since the scenario's start, so refills and window
// boundaries are exact.
type Step struct {
	At      time.Duration
	Method  string // default GET
	Path    string // default /
	Route   string
	VHost   string
	Source  string // "ip:port", default 192.0.2.1:5555
	Headers [][2]string

	// Want is the local-response status, or 0 when the request must continue upstream.
	Want int
	// WantHeaders are headers the client must see (on the local response, or on the
	// upstream response for a continued request); a value of "-" means "must be absent".
	WantHeaders map[string]string
	// WantBody is a substring the local response body must contain.
	WantBody string
	// WantNoBody says the local response must have an empty body (a gRPC denial).
	WantNoBody bool
	// WantGrpcStatus, when not 0, is the grpc-status the local response must carry.
	WantGrpcStatus int
	// WantUpstreamHeaders are request headers the upstream must receive (for a continued
	// request), "-" meaning "must be absent", as in WantHeaders.
	WantUpstreamHeaders map[string]string
	// WantFilterState are properties the filter must have set on the stream (what Envoy's
	// access log reads as %FILTER_STATE(wasm.<name>:PLAIN)%), by name.
	WantFilterState map[string]string
}

// Outcome is what a driver observed for one step.
type Outcome struct {
	Status  int // 0: continued
	Headers map[string]string
	Body    string
	// GrpcStatus is the gRPC status given with the local response, -1 when none.
	GrpcStatus int
	// Upstream are the request headers as the filter let them go upstream (continued
	// requests only).
	Upstream map[string]string
	// FilterState are the properties the filter set on the stream, by name.
	FilterState map[string]string
}

// Driver runs requests through one filter instance.
type Driver interface {
	Do(t *testing.T, at time.Time, s Step) Outcome
}

// T0 is the scenarios' epoch: a fixed instant a little after a whole hour, so clock-aligned
// windows have known boundaries.
var T0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Run plays sc through d, step by step, and fails t at the first step whose outcome differs.
func Run(t *testing.T, d Driver, sc Scenario) {
	t.Helper()
	for i, s := range sc.Steps {
		got := d.Do(t, T0.Add(s.At), s)
		if got.Status != s.Want {
			t.Fatalf("step %d (at %v, path %s): status %d (0 = continued), want %d; headers %v body %q",
				i, s.At, s.Path, got.Status, s.Want, got.Headers, got.Body)
		}
		checkHeaders(t, i, "header", s.WantHeaders, got.Headers)
		checkHeaders(t, i, "upstream request header", s.WantUpstreamHeaders, got.Upstream)
		checkHeaders(t, i, "filter state", s.WantFilterState, got.FilterState)
		if s.WantBody != "" && !strings.Contains(got.Body, s.WantBody) {
			t.Fatalf("step %d: body %q does not contain %q", i, got.Body, s.WantBody)
		}
		if s.WantNoBody && got.Body != "" {
			t.Fatalf("step %d: body must be empty, got %q", i, got.Body)
		}
		if s.WantGrpcStatus != 0 && got.GrpcStatus != s.WantGrpcStatus {
			t.Fatalf("step %d: grpc status %d, want %d", i, got.GrpcStatus, s.WantGrpcStatus)
		}
	}
}

// checkHeaders fails t when have differs from want ("-": must be absent).
func checkHeaders(t *testing.T, step int, what string, want, have map[string]string) {
	t.Helper()
	for k, v := range want {
		h, ok := have[k]
		switch {
		case v == "-" && ok:
			t.Fatalf("step %d: %s %s must be absent, got %q", step, what, k, h)
		case v != "-" && !ok:
			t.Fatalf("step %d: %s %s missing; have %v", step, what, k, have)
		case v != "-" && h != v:
			t.Fatalf("step %d: %s %s is %q, want %q", step, what, k, h, v)
		}
	}
}

// MethodPath returns the step's method and path with their defaults (GET and /).
func (s Step) MethodPath() (method, path string) {
	method, path = s.Method, s.Path
	if method == "" {
		method = "GET"
	}
	if path == "" {
		path = "/"
	}
	return method, path
}

// RequestHeaders returns the step's request headers, pseudo-headers first.
func (s Step) RequestHeaders() [][2]string {
	method, path := s.MethodPath()
	h := [][2]string{{":method", method}, {":path", path}, {":authority", "example.test"}, {":scheme", "http"}}
	return append(h, s.Headers...)
}

// SourceAddress returns the step's client address, 192.0.2.1:5555 by default.
func (s Step) SourceAddress() string {
	if s.Source == "" {
		return "192.0.2.1:5555"
	}
	return s.Source
}

// XK is a request with the header x-k: v and nothing else, the key of most table tests.
func XK(v string) Step { return Step{Headers: [][2]string{{"x-k", v}}} }

// HeaderMap flattens headers for assertions; repeated names are joined like HTTP does.
func HeaderMap(pairs [][2]string) map[string]string {
	m := map[string]string{}
	for _, kv := range pairs {
		k := strings.ToLower(kv[0])
		if old, ok := m[k]; ok {
			m[k] = old + ", " + kv[1]
			continue
		}
		m[k] = kv[1]
	}
	return m
}
