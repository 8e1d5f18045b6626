package config_test

import (
	"fmt"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// request is a minimal config.Request for the examples.
type request struct {
	headers map[string]string
	path    string
}

func (r request) Header(name string) (string, bool) { v, ok := r.headers[name]; return v, ok }
func (r request) HeaderLines(name string) (first, last string, n int) {
	if v, ok := r.headers[name]; ok {
		return v, v, 1
	}
	return "", "", 0
}
func (r request) Method() string                       { return "GET" }
func (r request) Path() string                         { return r.path }
func (r request) Route() string                        { return "api" }
func (r request) VirtualHost() string                  { return "example.com" }
func (r request) SourceAddress() string                { return "203.0.113.7:50000" }
func (r request) ClientIPCache() *config.ClientIPCache { return nil }

func ExampleParse() {
	_, err := config.Parse([]byte(`{
		"rules": [
			{"name": "api", "algorithm": "token_bucket", "limt": 100, "window": "1m"},
			{"name": "api", "algorithm": "gcra", "limit": 10, "window": "10"}
		]
	}`))
	fmt.Println(err)
	// Output:
	// rules[0].limt: unknown field (did you mean "limit"?)
	// rules[0].limit: required
	// rules[1].window: "10" has no unit
	// rules[1].name: duplicate of rules[0].name "api"
}

func ExampleConfig_Match() {
	cfg, err := config.Parse([]byte(`{
		"rules": [
			{"name": "per-tenant", "key": [{"source": "header", "name": "x-tenant"}],
			 "algorithm": "fixed_window", "limit": 1000, "window": "1m", "continue": true},
			{"name": "per-ip", "key": [{"source": "client_ip", "ipv4_prefix": 24}],
			 "algorithm": "token_bucket", "limit": 50, "window": "1s"}
		]
	}`))
	if err != nil {
		panic(err)
	}
	var rules []*config.Rule
	var key []byte
	for _, req := range []request{
		{headers: map[string]string{"x-tenant": "acme"}, path: "/orders"},
		{headers: map[string]string{}, path: "/orders"}, // no tenant: per-tenant is skipped
	} {
		rules = cfg.Match(req, rules[:0])
		for _, r := range rules {
			key, _ = r.AppendKey(key[:0], req)
			fmt.Printf("%s %q cost=%d\n", r.Name, key, r.Cost(req))
		}
	}
	// Output:
	// per-tenant "4:acme" cost=1
	// per-ip "14:203.0.113.0/24" cost=1
	// per-ip "14:203.0.113.0/24" cost=1
}
