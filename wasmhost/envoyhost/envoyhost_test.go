package envoyhost

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/echo"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bootstrap exercises what the Server adds on top of envoyconf and wasmhost: routing to
// several clusters, a route without the filter, a direct response, Envoy's 404 for no route
// (with the filter still running), and the admin interface.
const bootstrap = `
admin:
  address: { socket_address: { address: 0.0.0.0, port_value: 9901 } }
stats_config:
  stats_tags:
  - tag_name: rule
    regex: '(;rule=([^;]+))'
  - tag_name: decision
    regex: '(;decision=([^;]+))'
static_resources:
  listeners:
  - name: main
    address: { socket_address: { address: 0.0.0.0, port_value: 10000 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: main
          use_remote_address: true
          access_log:
          - name: envoy.access_loggers.stdout
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
          - name: envoy.access_loggers.stderr
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StderrAccessLog
              log_format:
                text_format_source:
                  inline_string: "%RESPONSE_CODE% %ROUTE_NAME% rule=%FILTER_STATE(wasm.ratelimit.rule:PLAIN)% decision=%FILTER_STATE(wasm.ratelimit.decision:PLAIN)% %UPSTREAM_CLUSTER% 100%% %REQ(X-REQUEST-ID):8%\n"
          normalize_path: true
          route_config:
            virtual_hosts:
            - name: vh
              domains: ["*"]
              routes:
              - name: a
                match: { prefix: /a/ }
                route: { cluster: a }
              - name: b
                match: { prefix: /b/ }
                route: { cluster: b }
                typed_per_filter_config:
                  rl:
                    "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
                    disabled: true
              - name: teapot
                match: { path: /teapot }
                direct_response: { status: 418, body: { inline_string: "short and stout" } }
          http_filters:
          - name: rl
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: rl
                root_id: rl
                vm_config:
                  vm_id: envoyhost-test
                  runtime: envoy.wasm.runtime.v8
                  code: { local: { filename: /nonexistent/ratelimit.wasm } }
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: |
                    {"filter_state": true, "rules": [
                      {"name": "a-limit", "match": {"routes": ["a"]}, "algorithm": "fixed_window", "limit": 2, "window": "1h"},
                      {"name": "b-limit", "match": {"routes": ["b"]}, "algorithm": "fixed_window", "limit": 1, "window": "1h"},
                      {"name": "no-route", "match": {"path": {"prefix": "/nowhere"}}, "algorithm": "fixed_window", "limit": 1, "window": "1h"}
                    ]}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: a
    load_assignment:
      cluster_name: a
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: a.invalid, port_value: 80 } } } }] }]
  - name: b
    load_assignment:
      cluster_name: b
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: b.invalid, port_value: 80 } } } }] }]
`

func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, string(b)
}

func TestServer(t *testing.T) {
	cfg, err := envoyconf.Parse([]byte(bootstrap))
	require.NoError(t, err)
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "A "+r.URL.Path) }))
	defer a.Close()
	b := httptest.NewServer(echo.Handler())
	defer b.Close()
	require.NoError(t, cfg.Override("a", a.URL))
	require.NoError(t, cfg.Override("b", b.URL))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = Start(ctx, cfg, Options{Bind: "127.0.0.1", EphemeralPorts: true})
	require.ErrorContains(t, err, "/nonexistent/ratelimit.wasm", "without Options.Wasm the configured file is read")

	var accessLog, formatted lockedBuffer
	s, err := Start(ctx, cfg, Options{Wasm: wasmtest.BuildModule(t), Bind: "127.0.0.1", EphemeralPorts: true, Stdout: &accessLog, Stderr: &formatted})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close(context.Background())) }()
	// The bootstrap's stdout access log gets one line per request, in Envoy's default format,
	// the filter's 429s included: the request id the connection manager gave the request, and
	// for a forwarded request the upstream's service time and address.
	defer func() {
		lines := strings.Split(strings.TrimSpace(accessLog.String()), "\n")
		assert.Len(t, lines, 10, accessLog.String())
		uuid := `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`
		assert.Regexp(t, `^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "GET /a/x HTTP/1.1" 200 - 0 \d+ \d+ \d+ "127.0.0.1" "Go-http-client/1.1" "`+uuid+`" "127.0.0.1:\d+" "127.0.0.1:\d+"$`, lines[0])
		assert.Regexp(t, `^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "GET /a/x HTTP/1.1" 429 - 0 \d+ \d+ - "127.0.0.1" "Go-http-client/1.1" "`+uuid+`" "127.0.0.1:\d+" "-"$`, lines[2])
		// The stderr log's format reads the filter's decision from the filter state, as
		// Envoy's %FILTER_STATE(wasm.ratelimit.rule:PLAIN)% does; "%%" is a '%', ":8" cuts.
		flines := strings.Split(strings.TrimSpace(formatted.String()), "\n")
		assert.Len(t, flines, 10, formatted.String())
		assert.Regexp(t, `^200 a rule=a-limit decision=allowed a 100% [0-9a-f]{8}$`, flines[0])
		assert.Regexp(t, `^429 a rule=a-limit decision=denied a 100% [0-9a-f]{8}$`, flines[2])
		assert.Regexp(t, `^200 b rule=- decision=- b 100% [0-9a-f]{8}$`, flines[3], "the filter is disabled on route b")
	}()
	base, admin := s.URL("main"), s.AdminURL()
	require.True(t, strings.HasPrefix(base, "http://127.0.0.1:"), base)
	require.NotEqual(t, "http://127.0.0.1:10000", base, "EphemeralPorts")
	require.NotNil(t, s.Host("main"))
	require.Empty(t, s.Notes(), "FAIL_CLOSED (the default) is what the wazero host models")

	// Route a: the filter runs (limit 2), normalisation happens first, cluster a answers.
	for i := 0; i < 2; i++ {
		code, _, body := get(t, base+"/b/../a/x")
		require.Equal(t, 200, code)
		require.Equal(t, "A /a/x", body)
	}
	code, _, _ := get(t, base+"/a/x")
	require.Equal(t, 429, code)

	// Route b: the filter is disabled, so its limit of 1 never applies. Under
	// use_remote_address the connection manager appends the peer to X-Forwarded-For.
	for i := 0; i < 3; i++ {
		code, hdr, body := get(t, base+"/b/y")
		require.Equal(t, 200, code)
		require.Contains(t, body, `"upstream": "echo"`)
		require.Contains(t, body, `"x-forwarded-for": "127.0.0.1"`)
		require.Empty(t, hdr.Get("ratelimit"))
	}
	req, err := http.NewRequest("GET", base+"/b/y", nil)
	require.NoError(t, err)
	req.Header.Add("X-Forwarded-For", "203.0.113.1")
	req.Header.Add("X-Forwarded-For", "198.51.100.2")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	xff, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Contains(t, string(xff), `"x-forwarded-for": "203.0.113.1, 198.51.100.2, 127.0.0.1"`)

	// A direct response, and Envoy's 404 for no route, with the filter still deciding.
	code, hdr, body := get(t, base+"/teapot")
	require.Equal(t, 418, code)
	require.Equal(t, "short and stout", body)
	require.Equal(t, "text/plain", hdr.Get("content-type"))
	code, _, _ = get(t, base+"/nowhere")
	require.Equal(t, 404, code)
	code, _, _ = get(t, base+"/nowhere")
	require.Equal(t, 429, code, "the filter runs when no route matched")

	// Admin.
	code, _, body = get(t, admin+"/ready")
	assert.Equal(t, 200, code)
	assert.Equal(t, "LIVE\n", body)
	_, hdr, body = get(t, admin+"/stats/prometheus")
	assert.Contains(t, hdr.Get("content-type"), "text/plain")
	// The bootstrap's stats_tags turn the rule and the decision into labels, one family for
	// every rule's decisions.
	assert.Contains(t, body, "# TYPE ratelimit_requests_total counter\n")
	assert.Equal(t, 1, strings.Count(body, "# TYPE ratelimit_requests_total "), body)
	assert.Contains(t, body, `ratelimit_requests_total{rule="a-limit",decision="allowed"} 2`+"\n")
	assert.Contains(t, body, `ratelimit_requests_total{rule="a-limit",decision="denied"} 1`+"\n")
	assert.Contains(t, body, `ratelimit_requests_total{rule="b-limit",decision="allowed"} 0`+"\n")
	assert.Contains(t, body, `ratelimit_key_slots_used{rule="a-limit"} 1`+"\n")
	_, _, body = get(t, admin+"/stats")
	assert.Contains(t, body, "ratelimit_requests_total;rule=a-limit;decision=allowed: 2\n")
	code, _, _ = get(t, admin+"/nope")
	assert.Equal(t, 404, code)

	// /stats?filter=REGEX keeps the stats whose names the regular expression matches.
	_, _, body = get(t, admin+"/stats?filter=a-limit;decision=(allowed|denied)$")
	assert.Equal(t, "ratelimit_requests_total;rule=a-limit;decision=allowed: 2\nratelimit_requests_total;rule=a-limit;decision=denied: 1\n", body)
	code, _, _ = get(t, admin+"/stats?filter=(")
	assert.Equal(t, 400, code)
	// /clusters lists each cluster's endpoint; /server_info the state, uptime and concurrency.
	_, _, body = get(t, admin+"/clusters")
	assert.Regexp(t, `(?m)^a::127\.0\.0\.1:\d+::health_flags::healthy$`, body)
	assert.Regexp(t, `(?m)^b::127\.0\.0\.1:\d+::health_flags::healthy$`, body)
	_, _, body = get(t, admin+"/server_info")
	var info struct {
		State   string `json:"state"`
		Options struct {
			Concurrency int `json:"concurrency"`
		} `json:"command_line_options"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &info), body)
	assert.Equal(t, "LIVE", info.State)
	assert.Equal(t, 2, info.Options.Concurrency)
	// /config_dump shows the filter configurations in force, as given and as the filter reads
	// them (defaults filled in).
	_, _, body = get(t, admin+"/config_dump")
	var dump struct {
		Configs []struct {
			Filters []struct {
				Listener, Name, Configuration string
				Effective                     struct {
					FilterState bool `json:"filter_state"`
					Rules       []struct {
						Name    string `json:"name"`
						MaxKeys int    `json:"max_keys"`
					} `json:"rules"`
				} `json:"effective_configuration"`
			} `json:"filters"`
		} `json:"configs"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &dump), body)
	require.Len(t, dump.Configs, 1)
	require.Len(t, dump.Configs[0].Filters, 1)
	f := dump.Configs[0].Filters[0]
	assert.Equal(t, "main", f.Listener)
	assert.Equal(t, "rl", f.Name)
	assert.Contains(t, f.Configuration, `"a-limit"`)
	assert.True(t, f.Effective.FilterState)
	assert.Equal(t, "a-limit", f.Effective.Rules[0].Name)
	assert.Equal(t, 10000, f.Effective.Rules[0].MaxKeys)
	assert.Equal(t, s.Addr("main")[strings.LastIndexByte(s.Addr("main"), ':'):], base[strings.LastIndexByte(base, ':'):])
}

// The connection manager's path handling happens before routing and before the filter: the
// upstream receives the normalised path, an encoded slash is refused, redirected or unescaped
// as path_with_escaped_slashes_action says, and the filter never sees a refused or redirected
// request.
func TestServerPathHandling(t *testing.T) {
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "A "+r.URL.Path) }))
	defer a.Close()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(t *testing.T, url, contentType string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		require.NoError(t, err)
		if contentType != "" {
			req.Header.Set("content-type", contentType)
		}
		res, err := noFollow.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, res.Header, string(b)
	}
	for _, action := range []string{"", "REJECT_REQUEST", "UNESCAPE_AND_REDIRECT", "UNESCAPE_AND_FORWARD"} {
		name := action
		if name == "" {
			name = "unset (KEEP_UNCHANGED)"
		}
		t.Run(name, func(t *testing.T) {
			yaml := bootstrap
			if action != "" {
				yaml = strings.Replace(yaml, "normalize_path: true", "normalize_path: true\n          path_with_escaped_slashes_action: "+action, 1)
			}
			cfg, err := envoyconf.Parse([]byte(yaml))
			require.NoError(t, err)
			require.NoError(t, cfg.Override("a", a.URL))
			require.NoError(t, cfg.Override("b", a.URL))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := Start(ctx, cfg, Options{Wasm: wasmtest.BuildModule(t), Bind: "127.0.0.1", EphemeralPorts: true, Stdout: io.Discard})
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Close(context.Background())) }()
			base := s.URL("main")

			// Percent-encoded unreserved characters are decoded before routing, and the
			// upstream receives the normalised path.
			code, _, body := send(t, base+"/%61/%78", "")
			require.Equal(t, 200, code)
			require.Equal(t, "A /a/x", body)

			code, hdr, body := send(t, base+"/b/..%2Fa/x", "")
			switch action {
			case "":
				require.Equal(t, 200, code) // routed as /b/..%2Fa/x: route b
			case "REJECT_REQUEST":
				require.Equal(t, 400, code)
			case "UNESCAPE_AND_REDIRECT":
				require.Equal(t, 307, code)
				require.Equal(t, "/a/x", hdr.Get("location"))
				code, _, _ = send(t, base+"/b/..%2Fa/x", "application/grpc")
				require.Equal(t, 400, code, "gRPC clients do not follow redirects")
			case "UNESCAPE_AND_FORWARD":
				require.Equal(t, 200, code)
				require.Equal(t, "A /a/x", body)
			}
			// The second request to route a is still allowed (limit 2): neither a refused
			// nor a redirected request reached the filter.
			code, _, _ = send(t, base+"/a/y", "")
			if action == "UNESCAPE_AND_FORWARD" {
				require.Equal(t, 429, code)
			} else {
				require.Equal(t, 200, code)
			}
		})
	}
}

// lockedBuffer is a writer the server's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
