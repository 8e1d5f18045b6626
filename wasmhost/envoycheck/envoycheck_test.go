package envoycheck

import (
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// repoFile is a file of the repository, relative to its root.
func repoFile(name string) string { return filepath.Join("..", "..", name) }

// bootstrap is a small bootstrap with one listener running the filter with rules (JSON), two
// named routes ("public-api", and "internal" with the filter disabled) on the virtual host
// "main", and the connection manager's path settings hcm.
func bootstrap(rules, hcm string) string {
	indented := strings.ReplaceAll(strings.TrimSpace(rules), "\n", "\n                    ")
	return `
static_resources:
  listeners:
  - name: main
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: main
` + hcm + `
          route_config:
            name: main
            virtual_hosts:
            - name: main
              domains: ["*"]
              routes:
              - name: public-api
                match: { prefix: /api }
                route: { cluster: upstream }
              - name: internal
                match: { prefix: /internal }
                route: { cluster: upstream }
                typed_per_filter_config:
                  envoy.filters.http.wasm:
                    "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
                    disabled: true
          http_filters:
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: ratelimit
                root_id: ratelimit
                vm_config:
                  vm_id: ratelimit
                  runtime: envoy.wasm.runtime.v8
                  code: { local: { filename: /etc/envoy/ratelimit.wasm } }
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: |
                    ` + indented + `
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: upstream
    type: STATIC
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8080 } } }
`
}

// normalised is the connection manager's path handling of the shipped envoy.yaml, under which
// every spelling of a path is routed and read as one.
const normalised = "          normalize_path: true\n          merge_slashes: true\n          path_with_escaped_slashes_action: UNESCAPE_AND_REDIRECT"

// A typo, "public_api" for the route "public-api", would silently turn the limit off. It is
// an error, with a suggestion.
func TestRouteTypoIsAnError(t *testing.T) {
	rep := Bytes([]byte(bootstrap(`{"rules":[{"name":"api","match":{"routes":["public_api"]},
		"algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised)))
	if rep.OK() {
		t.Fatalf("a rule naming a route that does not exist passed: %+v", rep)
	}
	want := `match.routes[0]: "public_api" is no route of this listener (did you mean "public-api"?)`
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], want) {
		t.Fatalf("errors %q, want one containing %q", rep.Errors, want)
	}
}

func TestVirtualHostTypoIsAnError(t *testing.T) {
	rep := Bytes([]byte(bootstrap(`{"rules":[{"name":"api","match":{"virtual_hosts":["mian"]},
		"algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised)))
	want := `match.virtual_hosts[0]: "mian" is no virtual host of this listener (did you mean "main"?)`
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], want) {
		t.Fatalf("errors %q, want one containing %q", rep.Errors, want)
	}
}

// A redis.cluster the bootstrap does not define would send every global rule to its failure
// mode on every request: an error, with a suggestion like a route name's.
func TestRedisClusterTypoIsAnError(t *testing.T) {
	rules := `{"redis":{"cluster":"%s","authority":"webdis.local"},
		"rules":[{"name":"g","scope":"global","algorithm":"token_bucket","limit":5,"window":"1s"}]}`
	rep := Bytes([]byte(bootstrap(strings.Replace(rules, "%s", "upstram", 1), normalised)))
	want := `redis.cluster: "upstram" is no static cluster of this bootstrap (did you mean "upstream"?)`
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], want) {
		t.Fatalf("errors %q, want one containing %q", rep.Errors, want)
	}
	if rep := Bytes([]byte(bootstrap(strings.Replace(rules, "%s", "upstream", 1), normalised))); !rep.OK() {
		t.Fatalf("a redis.cluster the bootstrap defines: %q", rep.Errors)
	}
}

// Rule names that differ only in '.', '-' and '_' share their metrics in a Prometheus that
// reads Envoy's flat stat names: config.Parse refuses them, so the check does as the plugin.
func TestFlatRuleNameCollisionIsAnError(t *testing.T) {
	rep := Bytes([]byte(bootstrap(`{"rules":[{"name":"api.v1","continue":true,"algorithm":"token_bucket","limit":5,"window":"1s"},
		{"name":"api_v1","algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised)))
	want := `rules[1].name: "api_v1" and rules[0].name "api.v1" differ only in '.', '-' and '_'`
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], want) {
		t.Fatalf("errors %q, want one containing %q", rep.Errors, want)
	}
}

// A filter configuration the filter would refuse fails the check with the parser's message.
func TestInvalidPluginConfigIsAnError(t *testing.T) {
	rep := Bytes([]byte(bootstrap(`{"rules":[{"name":"api","limt":5,"algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised)))
	want := `rules[0].limt: unknown field (did you mean "limit"?)`
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], want) {
		t.Fatalf("errors %q, want one containing %q", rep.Errors, want)
	}
}

// A bootstrap Envoy's API rules refuse fails the check.
func TestInvalidBootstrapIsAnError(t *testing.T) {
	bad := strings.Replace(bootstrap(`{"rules":[{"name":"a","algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised),
		"port_value: 10000", "port_value: 70000", 1)
	if rep := Bytes([]byte(bad)); rep.OK() {
		t.Fatalf("a port of 70000 passed: %+v", rep)
	}
}

// Each warning, on a configuration that is valid but probably wrong, and
// none on the same rules written as meant.
func TestWarnings(t *testing.T) {
	for _, c := range []struct {
		name, rules, hcm, want string
	}{
		{"route with the filter disabled", `{"rules":[{"name":"r","match":{"routes":["internal"]},
			"algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised,
			`rules[0] ("r"): can never apply: the filter is disabled on every route it names (internal)`},
		{"after a catch-all", `{"rules":[{"name":"all","algorithm":"token_bucket","limit":5,"window":"1s"},
			{"name":"late","match":{"routes":["public-api"]},"algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised,
			`rules[1] ("late"): can never apply: rules[0] ("all") applies to every request`},
		{"path rule without normalisation", `{"rules":[{"name":"p","match":{"path":{"prefix":"/login"}},
			"algorithm":"token_bucket","limit":5,"window":"1s"}]}`, "",
			`depends on how the path is spelt, but the connection manager has normalize_path: false, merge_slashes: false, path_with_escaped_slashes_action: KEEP_UNCHANGED: match.path: "/login" spelt "/./login", "//login" or "/x/..%2Flogin" (if the upstream decodes %2F) misses the condition`},
		{"per-IP key without an IPv6 prefix", `{"rules":[{"name":"ip","key":[{"source":"client_ip"}],
			"algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised,
			`key[0]: client_ip without ipv6_prefix`},
		{"shadow rule with client headers", `{"rules":[{"name":"s","shadow":true,"shadow_headers":true,
			"algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised,
			`a shadow rule with shadow_headers`},
		{"partitions under a hash-tagged key prefix", `{"redis":{"cluster":"upstream","key_prefix":"{app}","partitions":4},
			"rules":[{"name":"g","scope":"global","algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised,
			`redis.partitions: 4 partitions spread nothing: the hash tag in key_prefix "{app}" puts every key on one slot`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := Bytes([]byte(bootstrap(c.rules, c.hcm)))
			if !rep.OK() {
				t.Fatalf("errors: %q", rep.Errors)
			}
			if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], c.want) {
				t.Fatalf("warnings %q, want one containing %q", rep.Warnings, c.want)
			}
		})
	}
	clean := `{"rules":[
		{"name":"ip","continue":true,"key":[{"source":"client_ip","ipv6_prefix":64}],"algorithm":"token_bucket","limit":5,"window":"1s"},
		{"name":"p","match":{"routes":["public-api"],"path":{"prefix":"/api/v1"}},"algorithm":"token_bucket","limit":5,"window":"1s"},
		{"name":"s","shadow":true,"algorithm":"token_bucket","limit":5,"window":"1s"}]}`
	if rep := Bytes([]byte(bootstrap(clean, normalised))); !rep.OK() || len(rep.Warnings) != 0 {
		t.Fatalf("the clean configuration: %+v", rep)
	}
	// A key on the route name is missing from a request without one (no route matched, or
	// an unnamed route), which skips the rule: the rule does not take every request.
	byRoute := `{"rules":[{"name":"per-route","key":[{"source":"route"}],"algorithm":"token_bucket","limit":5,"window":"1s"},
		{"name":"late","match":{"routes":["public-api"]},"algorithm":"token_bucket","limit":5,"window":"1s"}]}`
	if rep := Bytes([]byte(bootstrap(byRoute, normalised))); !rep.OK() || len(rep.Warnings) != 0 {
		t.Fatalf("a rule keyed on the route name before another: %+v", rep)
	}
}

// shippedWithout is the shipped envoy.yaml with the connection manager's path settings
// replaced by hcm (each "setting: value" line in the file's order; "" removes it), and with
// extraRules (JSON objects, one per line) before its rules.
func shippedWithout(t *testing.T, hcm map[string]string, extraRules ...string) string {
	t.Helper()
	data, err := os.ReadFile(repoFile("envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for old, cur := range hcm {
		line := "          " + old + "\n"
		if !strings.Contains(s, line) {
			t.Fatalf("envoy.yaml no longer has %q", old)
		}
		if cur != "" {
			cur = "          " + cur + "\n"
		}
		s = strings.Replace(s, line, cur, 1)
	}
	const rules = "\"rules\": [\n"
	if !strings.Contains(s, rules) {
		t.Fatal("envoy.yaml no longer lists its rules the way this test expects")
	}
	for _, r := range extraRules {
		s = strings.Replace(s, rules, rules+"                        "+r+",\n", 1)
	}
	return s
}

// warningOf returns the one warning about the named rule, or "" when there is none.
func warningOf(t *testing.T, rep *Report, rule string) string {
	t.Helper()
	var found []string
	for _, w := range rep.Warnings {
		if strings.Contains(w, "(\""+rule+"\"): ") {
			found = append(found, w)
		}
	}
	if len(found) > 1 {
		t.Fatalf("%d warnings about %s: %q", len(found), rule, found)
	}
	return strings.Join(found, "")
}

// Without normalize_path and merge_slashes, Envoy routes "//login" and "/./login" as written:
// the log-in route's regex does not match them, so a rule selected by that route (the setup
// docs/routes.md recommends) does not apply, while the upstream serves them as /login. A rule
// keyed on the path counts each spelling under a key of its own. Both are warned about, with
// what to set; the shipped envoy.yaml, which sets both, has no warning (TestShippedConfigsPass).
func TestPathSpellingWithoutNormalisation(t *testing.T) {
	yaml := shippedWithout(t, map[string]string{"normalize_path: true": "normalize_path: false", "merge_slashes: true": "merge_slashes: false"},
		`{"name": "per-path", "continue": true, "key": [{"source": "path"}], "algorithm": "fixed_window", "limit": 5, "window": "1m"}`)
	rep := Bytes([]byte(yaml))
	if !rep.OK() {
		t.Fatalf("errors: %q", rep.Errors)
	}
	const off = `depends on how the path is spelt, but the connection manager has normalize_path: false, merge_slashes: false: `
	const fix = `; set normalize_path: true and merge_slashes: true (see docs/routes.md)`
	for rule, want := range map[string]string{
		"login-per-ip":      off + `match.routes: "/login" spelt "/./login" or "//login" misses route "login"` + fix,
		"public-api-per-ip": off + `match.routes: "/api/x" spelt "/./api/x" or "//api/x" misses route "public-api"` + fix,
		// A catch-all's requests are taken by the routes before it when spelt to start like them.
		"default-shadow": off + `match.routes: "/path" spelt "/api/../path" reaches route "public-api" rather than "default"` + fix,
		// A rule on every route: a spelling can reach the route where the filter is disabled,
		// and each spelling of a path is a key of its own.
		"per-path": off + `"/path" spelt "/internal/../path" reaches route "internal", where the filter is disabled; ` +
			`key[0] is the path: "/path" spelt "/./path" or "//path" counts under a key of its own, with a fresh allowance` + fix,
	} {
		if got := warningOf(t, rep, rule); !strings.HasSuffix(got, want) {
			t.Errorf("warning about %s:\n%s\nwant one ending\n%s", rule, got, want)
		}
	}
	// Unset is Envoy's default, false, just the same.
	rep = Bytes([]byte(shippedWithout(t, map[string]string{"normalize_path: true": "", "merge_slashes: true": ""})))
	if got := warningOf(t, rep, "login-per-ip"); !strings.Contains(got, off) {
		t.Errorf("normalize_path and merge_slashes unset: warning about login-per-ip %q", got)
	}
}

// With normalize_path and merge_slashes but escaped slashes kept as they are (Envoy's
// default), "/x/..%2Flogin" is routed as written while an upstream that decodes %2F serves
// /login: route-selected and path-keyed rules are warned about, with the actions that close it.
func TestPathSpellingWithEscapedSlashesKept(t *testing.T) {
	rules := `{"rules":[
		{"name":"api","continue":true,"match":{"routes":["public-api"]},"key":[{"source":"client_ip","ipv6_prefix":64}],"algorithm":"token_bucket","limit":5,"window":"1s"},
		{"name":"per-route","key":[{"source":"route"}],"algorithm":"token_bucket","limit":5,"window":"1s"}]}`
	hcm := "          normalize_path: true\n          merge_slashes: true"
	rep := Bytes([]byte(bootstrap(rules, hcm)))
	if !rep.OK() {
		t.Fatalf("errors: %q", rep.Errors)
	}
	const off = `depends on how the path is spelt, but the connection manager has path_with_escaped_slashes_action: KEEP_UNCHANGED: `
	const fix = `; set path_with_escaped_slashes_action: UNESCAPE_AND_REDIRECT or REJECT_REQUEST (see docs/routes.md)`
	for rule, want := range map[string]string{
		"api": off + `match.routes: "/api" spelt "/x/..%2Fapi" (if the upstream decodes %2F) misses route "public-api"` + fix,
		"per-route": off + `"/path" spelt "/internal/..%2Fpath" (if the upstream decodes %2F) reaches route "internal", where the filter is disabled; ` +
			`key[0] is the route name: "/api" spelt "/x/..%2Fapi" (if the upstream decodes %2F) misses route "public-api", and counts under the name of the route it reaches, with a fresh allowance` + fix,
	} {
		if got := warningOf(t, rep, rule); !strings.HasSuffix(got, want) {
			t.Errorf("warning about %s:\n%s\nwant one ending\n%s", rule, got, want)
		}
	}
	for _, action := range []string{"UNESCAPE_AND_REDIRECT", "REJECT_REQUEST", "UNESCAPE_AND_FORWARD"} {
		rep := Bytes([]byte(bootstrap(rules, hcm+"\n          path_with_escaped_slashes_action: "+action)))
		if !rep.OK() || len(rep.Warnings) != 0 {
			t.Errorf("%s: %+v", action, rep)
		}
	}
}

// A key part on the :path header reads the path as a "path" key part does: without
// merge_slashes, "//path" counts under a key of its own. It is warned about the same way.
func TestPathSpellingKeyOnPathHeader(t *testing.T) {
	rules := `{"rules":[
		{"name":"per-path","continue":true,"key":[{"source":"path"}],"algorithm":"token_bucket","limit":5,"window":"1s"},
		{"name":"per-path-header","key":[{"source":"header","name":":path"}],"algorithm":"token_bucket","limit":5,"window":"1s"}]}`
	hcm := "          normalize_path: true\n          path_with_escaped_slashes_action: UNESCAPE_AND_REDIRECT"
	rep := Bytes([]byte(bootstrap(rules, hcm)))
	if !rep.OK() {
		t.Fatalf("errors: %q", rep.Errors)
	}
	const off = `depends on how the path is spelt, but the connection manager has merge_slashes: false: `
	const fix = `; set merge_slashes: true (see docs/routes.md)`
	for rule, want := range map[string]string{
		"per-path":        off + `key[0] is the path: "/path" spelt "//path" counts under a key of its own, with a fresh allowance` + fix,
		"per-path-header": off + `key[0] is the :path header: "/path" spelt "//path" counts under a key of its own, with a fresh allowance` + fix,
	} {
		if got := warningOf(t, rep, rule); !strings.HasSuffix(got, want) {
			t.Errorf("warning about %s:\n%s\nwant one ending\n%s", rule, got, want)
		}
	}
	// Another header is no path, and merge_slashes closes it.
	other := strings.Replace(rules, `"name":":path"`, `"name":"x-path"`, 1)
	if got := warningOf(t, Bytes([]byte(bootstrap(other, hcm))), "per-path-header"); got != "" {
		t.Errorf("a key on x-path: %s", got)
	}
	if rep := Bytes([]byte(bootstrap(rules, hcm+"\n          merge_slashes: true"))); !rep.OK() || len(rep.Warnings) != 0 {
		t.Errorf("merge_slashes: true: %+v", rep)
	}
}

// A rule whose routes Envoy does not choose by the path (every route of the virtual host
// matches every path) depends on no spelling, with or without normalisation, as the shipped
// e2e/envoy-failure-modes.yaml's listeners.
func TestPathSpellingWithoutPathRoutes(t *testing.T) {
	yaml := strings.Replace(bootstrap(`{"rules":[{"name":"api","match":{"routes":["public-api"]},"key":[{"source":"route"}],
		"algorithm":"token_bucket","limit":5,"window":"1s"}]}`, ""), "match: { prefix: /api }", "match: { prefix: / }", 1)
	yaml = strings.Replace(yaml, "match: { prefix: /internal }", `match: { prefix: /, headers: [{ name: x-internal, present_match: true }] }`, 1)
	rep := Bytes([]byte(yaml))
	if !rep.OK() || len(rep.Warnings) != 0 {
		t.Fatalf("%+v", rep)
	}
}

// The configurations the repository ships pass without a warning.
func TestShippedConfigsPass(t *testing.T) {
	for _, name := range []string{"envoy.yaml", "e2e/envoy-failure-modes.yaml", "e2e/redis-cluster/envoy-filter.yaml"} {
		rep := File(repoFile(name))
		if !rep.OK() || len(rep.Warnings) != 0 {
			t.Errorf("%s: %+v", name, rep)
		}
	}
}

// The command's exit status is what CI reads: 1 for the route typo in a copy of the shipped
// envoy.yaml, 0 for the file as shipped.
func TestCheckCommandExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	shipped, err := os.ReadFile(repoFile("envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	typo := strings.Replace(string(shipped), `"routes": ["public-api"]`, `"routes": ["public_api"]`, 1)
	if typo == string(shipped) {
		t.Fatal("envoy.yaml no longer names the route public-api the way this test expects")
	}
	dir := t.TempDir()
	typoPath := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(typoPath, []byte(typo), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := wasmtest.BuildCommand(t, "./wasmhost/cmd/ratelimit-host")
	out, err := exec.Command(bin, "check", typoPath).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("check of the typo: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), `"public_api" is no route of this listener (did you mean "public-api"?)`) {
		t.Fatalf("check of the typo says:\n%s", out)
	}
	if out, err := exec.Command(bin, "check", repoFile("envoy.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("check of the shipped envoy.yaml: %v\n%s", err, out)
	}
	// A plugin configuration alone: 0 when the filter accepts it, 1 when it does not.
	example := repoFile("filter/config/testdata/examples/global-redis.json")
	if out, err := exec.Command(bin, "check", example).CombinedOutput(); err != nil || !strings.Contains(string(out), "a plugin configuration alone") {
		t.Fatalf("check of %s: %v\n%s", example, err, out)
	}
	badPath := filepath.Join(dir, "plugin.json")
	if err := os.WriteFile(badPath, []byte(`{"rules":[{"name":"a","algorithm":"token_bucket","limt":5,"window":"1s"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "check", badPath).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "rules[0].limt: unknown field") {
		t.Fatalf("check of a bad plugin configuration: %v, want exit status 1\n%s", err, out)
	}
}

// Describe lists each route with the rules that can apply to it, from the bootstrap itself.
func TestDescribe(t *testing.T) {
	c, err := envoyconfParse(bootstrap(`{"rules":[
		{"name":"api","match":{"routes":["public-api"]},"key":[{"source":"client_ip","ipv6_prefix":64}],"algorithm":"token_bucket","limit":5,"window":"10s","burst":8},
		{"name":"dry","shadow":true,"algorithm":"fixed_window","limit":100,"window":"1m"}]}`, normalised))
	if err != nil {
		t.Fatal(err)
	}
	got := Describe(c)
	if w := formatWindow(90 * time.Minute); w != "1h30m" {
		t.Errorf("formatWindow(90m) = %q", w)
	}
	if w := formatWindow(time.Hour); w != "1h" {
		t.Errorf("formatWindow(1h) = %q", w)
	}
	for _, want := range []string{
		"  public-api     prefix /api\n                   api: 5 per 10s (token_bucket, burst 8) per client_ip\n                   dry: 100 per 1m (fixed_window), shadow: measured, never enforced\n",
		"  internal       prefix /internal\n                   not rate limited: the filter is disabled on this route\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

// A route that answers by itself says so, so the banner of `make run` does not suggest that
// its requests reach the upstream.
func TestDescribeDirectResponse(t *testing.T) {
	c, err := envoyconf.Load(repoFile("envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := "  path-parameters safe_regex .*;[^/]*/.*\n                   answered by the proxy with 400 (direct_response), after the filter's rules\n"
	if got := Describe(c); !strings.Contains(got, want) {
		t.Errorf("missing %q in\n%s", want, got)
	}
}

func envoyconfParse(yaml string) (*envoyconf.Config, error) { return envoyconf.Parse([]byte(yaml)) }

// Each violation of Envoy's API rules is an error of its own, at the YAML line of the field,
// with the field's path in the file's names.
func TestBootstrapRuleViolations(t *testing.T) {
	good := bootstrap(`{"rules":[{"name":"a","algorithm":"token_bucket","limit":5,"window":"1s"}]}`, normalised)
	const hcm = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config."
	type violation struct{ at, msg string } // at: the text of the file whose line the error names
	for _, tc := range []struct {
		name string
		edit [][2]string // old, new
		want []violation
	}{
		{"two in the connection manager",
			[][2]string{{"stat_prefix: main\n", "stat_prefix: \"\"\n"}, {"- name: envoy.filters.http.router", `- name: ""`}},
			[]violation{
				{`stat_prefix: ""`, hcm + "stat_prefix: value length must be at least 1 runes"},
				{`- name: ""`, hcm + "http_filters[1].name: value length must be at least 1 runes"},
			}},
		{"in the Wasm filter's typed_config",
			[][2]string{{"{ local: { filename: /etc/envoy/ratelimit.wasm } }", `{ local: { filename: "" } }`}},
			[]violation{{`filename: ""`, hcm + "http_filters[0].typed_config.config.vm_config.code.local.filename: value length must be at least 1 runes"}}},
		{"empty domains",
			[][2]string{{`domains: ["*"]`, `domains: []`}},
			[]violation{{`domains: []`, hcm + "route_config.virtual_hosts[0].domains: value must contain at least 1 item(s)"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := good
			for _, e := range tc.edit {
				if !strings.Contains(bad, e[0]) {
					t.Fatalf("the mutation no longer applies: %q", e[0])
				}
				bad = strings.Replace(bad, e[0], e[1], 1)
			}
			var want []string
			for _, v := range tc.want {
				line := strings.Count(bad[:strings.Index(bad, v.at)], "\n") + 1
				want = append(want, "YAML line "+strconv.Itoa(line)+": "+v.msg)
			}
			path := filepath.Join(t.TempDir(), "envoy.yaml")
			if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
				t.Fatal(err)
			}
			rep := File(path)
			if !reflect.DeepEqual(rep.Errors, want) {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(rep.Errors, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
