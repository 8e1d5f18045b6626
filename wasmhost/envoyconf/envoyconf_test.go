package envoyconf

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/stretchr/testify/require"
)

// repoRoot is where envoy.yaml lives, two levels up from this package.
var repoRoot = filepath.Join("..", "..")

// checkProductConfig is the whole check a shipped Envoy configuration must pass: Envoy's own
// schema and validation rules, the subset the wazero host serves, the filter's parser for
// every embedded plugin configuration, and the references between the two: the Redis cluster
// exists, and every route a rule selects exists in the listener (a rule for a misspelt route
// would silently never apply).
func checkProductConfig(data []byte) (*Config, error) {
	c, err := Parse(data)
	if err != nil {
		return nil, err
	}
	for _, l := range c.Listeners {
		if l.Filter == nil {
			continue
		}
		cfg, err := config.Parse(l.Filter.PluginConfig)
		if err != nil {
			return nil, fmt.Errorf("listener %s: filter configuration: %w", l.Name, err)
		}
		if cfg.Redis != nil && c.Clusters[cfg.Redis.Cluster] == nil {
			return nil, fmt.Errorf("listener %s: the filter's redis.cluster %q is not a cluster", l.Name, cfg.Redis.Cluster)
		}
		for _, r := range cfg.Rules {
			for _, name := range r.Match.Routes {
				if l.Route(name) == nil {
					return nil, fmt.Errorf("listener %s: rule %s matches route %q, which the listener does not have", l.Name, r.Name, name)
				}
			}
		}
	}
	return c, nil
}

// TestShippedConfigs validates envoy.yaml and every e2e/envoy*.yaml. A configuration Envoy
// would refuse, or whose filter JSON the filter would refuse at proxy_on_configure, fails
// `make test` here rather than at someone's `docker compose up`.
func TestShippedConfigs(t *testing.T) {
	files := []string{filepath.Join(repoRoot, "envoy.yaml")}
	more, err := filepath.Glob(filepath.Join(repoRoot, "e2e", "envoy*.yaml"))
	require.NoError(t, err)
	files = append(files, more...)
	require.GreaterOrEqual(t, len(files), 2, "envoy.yaml and the e2e configurations")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			c, err := checkProductConfig(data)
			require.NoError(t, err)
			require.NotEmpty(t, c.Listeners)
			for _, l := range c.Listeners {
				require.NotNil(t, l.Filter, "listener %s has no rate-limit filter", l.Name)
				require.Equal(t, "envoy.wasm.runtime.v8", l.Filter.Runtime, "the module needs V8 (Envoy's default build)")
				require.Equal(t, "/etc/envoy/ratelimit.wasm", l.Filter.CodeFile, "docker compose mounts the module there")
			}
			require.Empty(t, c.Warnings, "everything in a shipped configuration must be served by the wazero host too")
		})
	}
}

func TestEnvoyYAML(t *testing.T) {
	c, err := Load(filepath.Join(repoRoot, "envoy.yaml"))
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0:9901", c.Admin)
	require.Len(t, c.Listeners, 1)
	l := c.Listeners[0]
	require.Equal(t, "0.0.0.0:10000", l.Address)
	require.True(t, l.NormalizePath)
	require.True(t, l.MergeSlashes)
	require.Equal(t, EscapedSlashesUnescapeRedirect, l.EscapedSlashes)

	f := l.Filter
	require.Equal(t, "envoy.filters.http.wasm", f.FilterName)
	require.Equal(t, "ratelimit", f.PluginName)
	require.Equal(t, "ratelimit", f.RootID)
	require.Equal(t, "ratelimit", f.VMID)
	require.Equal(t, "FAIL_RELOAD", f.FailurePolicy)
	cfg, err := config.Parse(f.PluginConfig)
	require.NoError(t, err)
	require.Equal(t, "webdis", cfg.Redis.Cluster)
	require.NotNil(t, c.Clusters[cfg.Redis.Cluster], "the filter's Redis cluster must exist")

	require.Len(t, l.VirtualHosts, 1)
	var names []string
	for _, r := range l.VirtualHosts[0].Routes {
		names = append(names, r.Name)
		require.Equal(t, "default", r.VirtualHost)
		require.Equal(t, r.Name == "internal", r.FilterDisabled, r.Name)
		if r.Name == "path-parameters" {
			require.Equal(t, &DirectResponse{Status: 400}, r.Direct)
			continue
		}
		require.Equal(t, "upstream", r.Cluster)
		require.Equal(t, DefaultRouteTimeout, r.Timeout)
	}
	require.Equal(t, []string{"path-parameters", "login", "public-api", "internal", "global", "llm", "default"}, names)

	require.Equal(t, "upstream:8080", c.Clusters["upstream"].Address)
	require.Equal(t, "webdis:7379", c.Clusters["webdis"].Address)
	require.Equal(t, 250*time.Millisecond, c.Clusters["webdis"].ConnectTimeout)
}

func TestRoutingEnvoyYAML(t *testing.T) {
	c, err := Load(filepath.Join(repoRoot, "envoy.yaml"))
	require.NoError(t, err)
	l := c.Listeners[0]
	for _, tc := range []struct{ method, target, route string }{
		{"POST", "/login", "login"},
		{"POST", "/login?next=/home", "login"},
		{"GET", "/login", "default"}, // the route requires POST
		// Spellings of the log-in path that upstreams commonly serve as /login land on the
		// log-in route, not on a weaker one.
		{"POST", "/login/", "login"},
		{"POST", "/LOGIN", "login"},
		{"POST", "/Login/", "login"},
		{"POST", "/login;x=1", "login"},
		{"POST", "/login;jsessionid=1?next=/", "login"},
		{"POST", "/%6Cogin", "login"},
		{"POST", "/%6c%6f%67%69%6e/", "login"},
		{"POST", "/internal/../login", "login"},
		{"POST", "/internal/%2e%2e/login", "login"},
		// Suffixes that upstreams drop, trim or read as a format, a path parameter or a
		// fragment.
		{"POST", "/login.json", "login"},
		{"POST", "/login.html", "login"},
		{"POST", "/login%2e", "login"},
		{"POST", "/login.", "login"},
		{"POST", "/login%20", "login"},
		{"POST", "/login%09", "login"},
		{"POST", "/login~", "login"},
		{"POST", "/login%7E", "login"},
		{"POST", "/login%3Bjsessionid=1", "login"},
		{"POST", "/login%23", "login"},
		{"POST", "/login%2523", "login"},
		{"POST", "/LOGIN.JSON", "login"},
		{"POST", "/login::$DATA", "login"},
		{"POST", "/login%%36%66", "login"},
		// Other paths that merely start like it do not.
		{"POST", "/loginx", "default"},
		{"POST", "/login-help", "default"},
		{"GET", "/LOGIN", "default"},
		{"GET", "/api/v1/items", "public-api"},
		{"GET", "/api", "default"}, // the prefix is "/api/"
		{"GET", "/API/x", "default"},
		{"GET", "/internal/health", "internal"},
		{"GET", "/global/x", "global"},
		{"POST", "/v1/chat/completions", "llm"},
		{"GET", "/", "default"},
		{"DELETE", "/anything/else", "default"},
		// Normalisation happens before routing: these cannot dodge the login rule.
		{"POST", "/api/../login", "login"},
		{"POST", "//login", "login"},
		{"POST", "/./login", "login"},
	} {
		// Match reads the method and headers from the request, the path from its argument
		// (the request line's target may not parse as a URL: "%%36").
		r := httptest.NewRequest(tc.method, "http://example.com/", nil)
		path, verdict := l.NormalizeRequest(tc.target)
		require.Equal(t, PathContinue, verdict, tc.target)
		rt := l.Match(r, path)
		require.NotNil(t, rt, "%s %s", tc.method, tc.target)
		require.Equal(t, tc.route, rt.Name, "%s %s", tc.method, tc.target)
	}
	// A NUL fails the normalisation: Envoy answers 400 before any route. Path parameters in
	// a segment other than the last (which servlet containers strip, reading "/..;/" as
	// "/../") are answered 400 by a route of their own.
	for _, target := range []string{"/login%00", "/login%00.json"} {
		_, verdict := l.NormalizeRequest(target)
		require.Equal(t, PathReject, verdict, target)
	}
	for _, target := range []string{"/;x/login", "/.;/login", "/api/..;/login", "/login;a/b", "/%3B/login;x/"} {
		path, verdict := l.NormalizeRequest(target)
		require.Equal(t, PathContinue, verdict, target)
		rt := l.Match(httptest.NewRequest("POST", "http://example.com/", nil), path)
		require.NotNil(t, rt, target)
		require.Equal(t, "path-parameters", rt.Name, target)
		require.NotNil(t, rt.Direct, target)
		require.Equal(t, 400, rt.Direct.Status, target)
	}
	// An encoded slash is redirected to the path every party reads alike, which lands on
	// the log-in route; it never reaches the internal route unlimited.
	require.Equal(t, EscapedSlashesUnescapeRedirect, l.EscapedSlashes)
	for _, target := range []string{"/internal/..%2Flogin", "/internal%2F..%2flogin", "/api%2F..%5Clogin"} {
		path, verdict := l.NormalizeRequest(target)
		require.Equal(t, PathRedirect, verdict, target)
		require.Equal(t, "/login", path, target)
	}
}

const testBootstrap = `
static_resources:
  listeners:
  - name: l
    address: { socket_address: { address: 127.0.0.1, port_value: 8000 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: t
          strip_any_host_port: true
          route_config:
            name: rc
            typed_per_filter_config:
              rl:
                "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
                disabled: true
            virtual_hosts:
            - name: api
              domains: ["api.example.com"]
              typed_per_filter_config:
                rl:
                  "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
                  disabled: false
              routes:
              - name: sep
                match: { path_separated_prefix: /v1 }
                route: { cluster: a, timeout: 2s }
              - name: re
                match: { safe_regex: { regex: "/items/[0-9]+" } }
                route: { cluster: a }
                metadata: { filter_metadata: { rl: { tier: gold } } }
              - name: ci
                match: { prefix: /CaseLess, case_sensitive: false }
                route: { cluster: a }
                typed_per_filter_config:
                  rl:
                    "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
                    disabled: true
              - name: hdr
                match:
                  prefix: /h
                  headers:
                  - { name: x-tenant, string_match: { prefix: acme, ignore_case: true } }
                  - { name: x-debug, present_match: true, invert_match: true }
                  - { name: x-multi, string_match: { exact: "a,b" }, treat_missing_header_as_empty: false }
                route: { cluster: a }
              - name: missing
                match:
                  prefix: /m
                  headers:
                  - { name: x-gone, present_match: false }
                route: { cluster: a }
              - name: direct
                match: { prefix: /d }
                direct_response: { status: 418, body: { inline_string: teapot } }
            - name: wild-suffix
              domains: ["*.example.com"]
              routes:
              - { name: ws, match: { prefix: / }, route: { cluster: a } }
            - name: wild-longer-suffix
              domains: ["*.eu.example.com"]
              routes:
              - { name: wls, match: { prefix: / }, route: { cluster: a } }
            - name: wild-prefix
              domains: ["foo.*"]
              routes:
              - { name: wp, match: { prefix: / }, route: { cluster: a } }
            - name: any
              domains: ["*"]
              routes:
              - { name: any, match: { prefix: / }, route: { cluster: a } }
          http_filters:
          - name: rl
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: p
                vm_config:
                  vm_id: v
                  runtime: envoy.wasm.runtime.v8
                  code: { local: { filename: /x.wasm } }
                  configuration:
                    "@type": type.googleapis.com/google.protobuf.BytesValue
                    value: aGVsbG8=
                configuration:
                  "@type": type.googleapis.com/google.protobuf.Struct
                  value: { rules: [] }
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: a
    load_assignment:
      cluster_name: a
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: 10.0.0.1, port_value: 80 } } }
        - endpoint: { address: { socket_address: { address: 10.0.0.2, port_value: 80 } } }
`

func TestSubset(t *testing.T) {
	c, err := Parse([]byte(testBootstrap))
	require.NoError(t, err)
	require.Equal(t, "", c.Admin)
	require.Equal(t, "10.0.0.1:80", c.Clusters["a"].Address)
	require.Equal(t, 5*time.Second, c.Clusters["a"].ConnectTimeout, "Envoy's default connect_timeout")
	require.Len(t, c.Warnings, 1, "the second endpoint is ignored: %v", c.Warnings)

	l := c.Listener("l")
	require.NotNil(t, l)
	require.True(t, l.StripPort)
	require.Equal(t, EscapedSlashesKeep, l.EscapedSlashes, "Envoy's default when the field is unset")
	f := l.Filter
	require.Equal(t, "rl", f.FilterName)
	require.Equal(t, "FAIL_CLOSED", f.FailurePolicy, "UNSPECIFIED means FAIL_CLOSED")
	require.Equal(t, "hello", string(f.VMConfig), "BytesValue is passed without its wrapper")
	require.JSONEq(t, `{"rules":[]}`, string(f.PluginConfig), "Struct is passed as JSON")

	// Per-route FilterConfig: route beats virtual host beats route configuration.
	require.False(t, l.Route("sep").FilterDisabled, "virtual host enables it")
	require.True(t, l.Route("ci").FilterDisabled, "route disables it")
	require.True(t, l.Route("ws").FilterDisabled, "route configuration disables it")
	require.Equal(t, 2*time.Second, l.Route("sep").Timeout)
	require.NotEmpty(t, l.Route("re").Metadata)
	require.Equal(t, &DirectResponse{Status: 418, Body: []byte("teapot")}, l.Route("direct").Direct)

	type req struct {
		host, target string
		headers      map[string][]string
		want         string // route name, "" for no route
	}
	for _, tc := range []req{
		{"api.example.com", "/v1", nil, "sep"},
		{"api.example.com:8000", "/v1/x?y", nil, "sep"}, // port stripped
		{"API.Example.com", "/v1/", nil, "sep"},
		{"api.example.com", "/v10", nil, ""},
		{"api.example.com", "/items/42", nil, "re"},
		{"api.example.com", "/items/42?page=2", nil, "re"},
		{"api.example.com", "/items/4x", nil, ""},
		{"api.example.com", "/caseless/x", nil, "ci"},
		{"api.example.com", "/h", map[string][]string{"X-Tenant": {"ACME-1"}, "X-Multi": {"a", "b"}}, "hdr"},
		{"api.example.com", "/h", map[string][]string{"X-Tenant": {"acme"}, "X-Multi": {"a", "b"}, "X-Debug": {"1"}}, ""},
		{"api.example.com", "/h", map[string][]string{"X-Tenant": {"other"}, "X-Multi": {"a", "b"}}, ""},
		{"api.example.com", "/h", map[string][]string{"X-Tenant": {"acme"}}, ""},
		{"api.example.com", "/m", nil, "missing"},
		{"api.example.com", "/m", map[string][]string{"X-Gone": {""}}, ""},
		{"a.example.com", "/", nil, "ws"},
		{"a.eu.example.com", "/", nil, "wls"},
		{".example.com", "/", nil, "any"}, // a wildcard never matches the empty string
		{"example.com", "/", nil, "any"},
		{"foo.bar", "/", nil, "wp"},
		{"other", "/", nil, "any"},
	} {
		r := httptest.NewRequest("GET", "http://x"+tc.target, nil)
		r.Host = tc.host
		for k, vs := range tc.headers {
			for _, v := range vs {
				r.Header.Add(k, v)
			}
		}
		rt := l.Match(r, tc.target)
		got := ""
		if rt != nil {
			got = rt.Name
		}
		require.Equal(t, tc.want, got, "%s %s %v", tc.host, tc.target, tc.headers)
	}
}

func TestOverride(t *testing.T) {
	c, err := Load(filepath.Join(repoRoot, "envoy.yaml"))
	require.NoError(t, err)
	require.NoError(t, c.Override("upstream", "127.0.0.1:18080"))
	require.NoError(t, c.Override("webdis", "http://127.0.0.1:7379/"))
	require.Equal(t, map[string]string{
		"upstream": "http://127.0.0.1:18080",
		"webdis":   "http://127.0.0.1:7379",
	}, c.ClusterURLs())
	require.ErrorContains(t, c.Override("upstreem", "127.0.0.1:1"), `no cluster "upstreem"`)
	require.Error(t, c.Override("upstream", "no-port"))
}

func TestNormalize(t *testing.T) {
	l := &Listener{NormalizePath: true, MergeSlashes: true}
	for in, want := range map[string]string{
		"/":                 "/",
		"/a/b":              "/a/b",
		"/a/./b":            "/a/b",
		"/a/../b":           "/b",
		"/../../b":          "/b",
		"/a/b/..":           "/a/",
		"/a/%2e%2E/b":       "/b",
		"//a///b":           "/a/b",
		`/a\..\b`:           "/b",
		"/a/../b?x=/../y//": "/b?x=/../y//",
		// Percent-encoded unreserved characters are decoded (RFC 3986 section 6.2.2.2),
		// others are kept as written, and case is not changed.
		"/%6Cogin":            "/login",
		"/%6c%6F%67%69%6e":    "/login",
		"/%7E%2D%2e%5F%41%39": "/~-._A9",
		"/a%20b/%3B/%2F/%zz":  "/a%20b/%3B/%2F/%zz",
		"/LOGIN":              "/LOGIN",
		"/x/%2E%2e/login":     "/login",
		"/x/.%2e/login":       "/login",
		"/login?a=%6C":        "/login?a=%6C",
		// A '%' that starts no escape stays a literal percent sign: decoding the escape
		// after it must not make it start one.
		"/l%%36%66gin": "/l%256fgin",
		"/%%300":       "/%2500",
		"/%4%31":       "/%2541",
		"/%%2e":        "/%.",
		"/a%zz%41":     "/a%zzA",
		// Bytes a path may not hold are percent-encoded.
		"/login{x}|^`\"<>": "/login%7Bx%7D%7C%5E%60%22%3C%3E",
		"/caf\xc3\xa9":     "/caf%C3%A9",
	} {
		require.Equal(t, want, l.Normalize(in), in)
	}
	// A NUL fails the normalisation: Envoy answers 400.
	for _, in := range []string{"/login%00", "/login%00.json", "/a\x00b", "/x/%2e%2e/login%00?a=1"} {
		_, verdict := l.NormalizeRequest(in)
		require.Equal(t, PathReject, verdict, "%q", in)
	}
	_, verdict := (&Listener{MergeSlashes: true}).NormalizeRequest("/login%00")
	require.Equal(t, PathContinue, verdict, "without normalize_path a NUL is not looked at")
	require.Equal(t, "//a/../b", (&Listener{}).Normalize("//a/../b"), "both switches off")
	require.Equal(t, "/%6Cogin", (&Listener{MergeSlashes: true}).Normalize("/%6Cogin"), "decoding is part of normalize_path")
}

// path_with_escaped_slashes_action acts before normalisation, on the path only.
func TestEscapedSlashes(t *testing.T) {
	type result struct {
		path    string
		verdict PathVerdict
	}
	for _, tc := range []struct {
		action string
		in     string
		want   result
	}{
		{EscapedSlashesKeep, "/internal/..%2Flogin", result{"/internal/..%2Flogin", PathContinue}},
		{EscapedSlashesReject, "/internal/..%2flogin", result{"/internal/..%2flogin", PathReject}},
		{EscapedSlashesReject, "/a%5Cb", result{"/a%5Cb", PathReject}},
		{EscapedSlashesReject, "/login?next=%2F", result{"/login?next=%2F", PathContinue}},
		{EscapedSlashesUnescapeForward, "/internal/..%2Flogin", result{"/login", PathContinue}},
		{EscapedSlashesUnescapeForward, "/internal%5c..%5clogin", result{"/login", PathContinue}},
		{EscapedSlashesUnescapeRedirect, "/internal/..%2Flogin?x=%2F", result{"/login?x=%2F", PathRedirect}},
		{EscapedSlashesUnescapeRedirect, "/a%2f%2Fb", result{"/a/b", PathRedirect}},
		{EscapedSlashesUnescapeRedirect, "/login", result{"/login", PathContinue}},
		{EscapedSlashesUnescapeRedirect, "/%6Cogin", result{"/login", PathContinue}},
	} {
		l := &Listener{NormalizePath: true, MergeSlashes: true, EscapedSlashes: tc.action}
		p, v := l.NormalizeRequest(tc.in)
		require.Equal(t, tc.want, result{p, v}, "%s %s", tc.action, tc.in)
	}
}

// TestBrokenConfigs is the negative side of TestShippedConfigs: each mutation of envoy.yaml
// must be refused, with a message that says where.
func TestBrokenConfigs(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(repoRoot, "envoy.yaml"))
	require.NoError(t, err)
	_, err = checkProductConfig(good)
	require.NoError(t, err)

	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"unknown field", "stat_prefix: ingress_http", "stat_prefix: ingress_http\n          stat_prefx: oops", `YAML line %LINE%: unknown field "stat_prefx"`},
		{"wrong type", "port_value: 10000", "port_value: ten-thousand", `YAML line %LINE%: invalid value for uint32 field portValue: "ten-thousand"`},
		{"validation rule", "port_value: 10000", "port_value: 70000",
			"YAML line %LINE%: static_resources.listeners[0].address.socket_address.port_value: value must be less than or equal to 65535"},
		{"rule inside typed_config", "stat_prefix: ingress_http", `stat_prefix: ""`,
			"YAML line %LINE%: static_resources.listeners[0].filter_chains[0].filters[0].typed_config.stat_prefix: value length must be at least 1 runes"},
		{"unknown @type", "envoy.extensions.filters.http.router.v3.Router", "envoy.extensions.filters.http.routr.v3.Router", "routr"},
		{"bad enum", "failure_policy: FAIL_RELOAD", "failure_policy: FAIL_SOMETIMES", "FAIL_SOMETIMES"},
		{"unknown cluster", "route: { cluster: upstream }\n              # Everything", "route: { cluster: upstrem }\n              # Everything", `unknown cluster "upstrem"`},
		{"filter JSON typo", `"algorithm": "gcra"`, `"algoritm": "gcra"`, "algoritm"},
		{"filter JSON invalid value", `"limit": 5,`, `"limit": 0,`, "limit"},
		{"YAML syntax", "admin:\n", "admin:\n  - [", "yaml"},
		{"rule for a missing route", `"match": { "routes": ["public-api"] }`, `"match": { "routes": ["public_api"] }`, `matches route "public_api"`},
		{"missing Redis cluster", `"cluster": "webdis"`, `"cluster": "redis"`, `redis.cluster "redis" is not a cluster`},
		{"unsupported by the host", "match: { prefix: /api/ }", "match: { prefix: /api/, query_parameters: [{ name: q, present_match: true }] }", "only the path and headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, string(good), tc.old, "the mutation no longer applies to envoy.yaml")
			bad := strings.Replace(string(good), tc.old, tc.new, 1)
			_, err := checkProductConfig([]byte(bad))
			require.Error(t, err)
			// %LINE% stands for the line of the mutation, so that errors are seen to point
			// at the YAML a person wrote.
			line := strings.Count(bad[:strings.Index(bad, tc.new)], "\n") + 1
			if strings.HasPrefix(tc.new, "stat_prefix: ingress_http\n") {
				line++
			}
			t.Log(err)
			want := strings.ReplaceAll(tc.want, "%LINE%", fmt.Sprint(line))
			require.Contains(t, err.Error(), want)
		})
	}
}

func TestYAMLFeatures(t *testing.T) {
	// Anchors, aliases and merge keys are YAML, and Envoy's loader accepts them.
	data := strings.Replace(testBootstrap, "  clusters:\n  - name: a\n", `  clusters:
  - &base
    name: a
`, 1)
	data += `  - <<: *base
    name: b
`
	c, err := Parse([]byte(data))
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1:80", c.Clusters["b"].Address)

	_, err = Parse([]byte(""))
	require.ErrorContains(t, err, "empty")
	_, err = Parse([]byte("a: 1\na: 2\n"))
	require.ErrorContains(t, err, "a")
}

func TestRewriteProtojsonErrors(t *testing.T) {
	lm := lineMap{0, 7, 9}
	for _, in := range []string{
		`proto: (line 3:5): unknown field "x"`,
		"proto:\u00a0(line 3:5): unknown field \"x\"",
		"proto:\u00a0 (line 3:5): unknown field \"x\"",
	} {
		require.Equal(t, `YAML line 9: unknown field "x"`, lm.rewrite(in), "%q", in)
	}
	require.Equal(t, `syntax error: unexpected token`, lineMap{}.rewrite("proto:\u00a0syntax error (line 1:1): unexpected token"), "no YAML line known: the JSON position is dropped")
}
