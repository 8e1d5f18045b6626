package filter

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A scenario is a configuration and a sequence of requests at fixed instants, each with the
// outcome a user would see. Every scenario runs twice: natively through the SDK's proxytest
// emulator (fast, precise failure messages) and against the compiled .wasm in the project's
// wazero host (the real module, several worker VMs, Envoy's host semantics).
type scenario struct {
	name   string
	config string
	steps  []step
}

// step is one request. at is the time since the scenario's start, so refills and window
// boundaries are exact.
type step struct {
	at      time.Duration
	method  string // default GET
	path    string // default /
	route   string
	vhost   string
	source  string // "ip:port", default 192.0.2.1:5555
	headers [][2]string

	// want is the local-response status, or 0 when the request must continue upstream.
	want int
	// wantHeaders are headers the client must see (on the local response, or on the
	// upstream response for a continued request); a value of "-" means "must be absent".
	wantHeaders map[string]string
	// wantBody is a substring the local response body must contain.
	wantBody string
}

// outcome is what a driver observed for one step.
type outcome struct {
	status  int // 0: continued
	headers map[string]string
	body    string
}

// driver runs requests through one filter instance.
type driver interface {
	do(t *testing.T, at time.Time, s step) outcome
}

// t0 is the scenarios' epoch: a fixed instant a little after a whole hour, so clock-aligned
// windows have known boundaries.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func runScenario(t *testing.T, d driver, sc scenario) {
	t.Helper()
	for i, s := range sc.steps {
		got := d.do(t, t0.Add(s.at), s)
		require.Equalf(t, s.want, got.status, "step %d (at %v, path %s): status (0 = continued); headers %v body %q",
			i, s.at, s.path, got.headers, got.body)
		for k, v := range s.wantHeaders {
			have, ok := got.headers[k]
			if v == "-" {
				require.Falsef(t, ok, "step %d: header %s must be absent, got %q", i, k, have)
				continue
			}
			require.Truef(t, ok, "step %d: header %s missing; have %v", i, k, got.headers)
			require.Equalf(t, v, have, "step %d: header %s", i, k)
		}
		if s.wantBody != "" {
			require.Containsf(t, got.body, s.wantBody, "step %d: body", i)
		}
	}
}

// requestHeaders returns the step's request headers, pseudo-headers first.
func (s step) requestHeaders() [][2]string {
	method, path := s.method, s.path
	if method == "" {
		method = "GET"
	}
	if path == "" {
		path = "/"
	}
	h := [][2]string{{":method", method}, {":path", path}, {":authority", "example.test"}, {":scheme", "http"}}
	return append(h, s.headers...)
}

func (s step) sourceAddress() string {
	if s.source == "" {
		return "192.0.2.1:5555"
	}
	return s.source
}

// headerMap flattens headers for assertions; repeated names are joined like HTTP does.
func headerMap(pairs [][2]string) map[string]string {
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
