package config

import "testing"

// benchConfigJSON is a realistic five-rule config: route, method, path and header
// conditions, and keys from the client IP, headers, the path and constants.
const benchConfigJSON = `{
	"trusted_hops": 1,
	"rules": [
		{"name": "admin", "match": {"routes": ["admin"], "methods": ["POST", "PUT", "DELETE"]},
		 "key": [{"source": "client_ip"}], "algorithm": "gcra", "limit": 10, "window": "1m"},
		{"name": "login", "match": {"path": {"exact": "/login"}, "methods": ["POST"]},
		 "key": [{"source": "client_ip", "ipv6_prefix": 64}], "algorithm": "sliding_window", "variant": "log", "limit": 5, "window": "1m"},
		{"name": "per-ip", "match": {"routes": ["api", "api-v2"], "path": {"prefix": "/v1/"}},
		 "key": [{"source": "client_ip", "ipv4_prefix": 24}], "algorithm": "token_bucket", "limit": 100, "window": "1s", "continue": true},
		{"name": "per-tenant", "match": {"routes": ["api"], "headers": [{"name": "x-tenant", "present": true}, {"name": "x-plan", "exact": "free"}]},
		 "key": [{"source": "const", "value": "t"}, {"source": "header", "name": "x-tenant"}, {"source": "path"}], "algorithm": "fixed_window", "limit": 1000, "window": "1m", "continue": true},
		{"name": "catch-all", "key": [{"source": "client_ip"}, {"source": "method"}], "algorithm": "token_bucket", "limit": 1000, "window": "1s"}
	]
}`

func benchConfig(tb testing.TB) *Config {
	return mustParse(tb, benchConfigJSON)
}

// benchRequest matches per-ip, per-tenant and catch-all.
func benchRequest() *fakeRequest {
	return req("x-tenant: acme-corporation", "x-plan: free", "x-forwarded-for: 203.0.113.50, 198.51.100.23", "user-agent: bench").
		with(func(r *fakeRequest) { r.path = "/v1/orders/12345?expand=items" })
}

func BenchmarkMatch(b *testing.B) {
	c := benchConfig(b)
	r := benchRequest()
	dst := make([]*Rule, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		dst = c.Match(r, dst[:0])
	}
	if len(dst) != 3 {
		b.Fatalf("matched %d rules", len(dst))
	}
}

func BenchmarkAppendKey(b *testing.B) {
	c := benchConfig(b)
	r := benchRequest()
	rules := c.Match(r, nil)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		for _, rule := range rules {
			var ok bool
			buf, ok = rule.AppendKey(buf[:0], r)
			if !ok {
				b.Fatal("no key")
			}
		}
	}
}

// BenchmarkMatchAndKeys is the whole per-request config work: match, then one key and one
// cost per applicable rule.
func BenchmarkMatchAndKeys(b *testing.B) {
	c := benchConfig(b)
	r := benchRequest()
	dst := make([]*Rule, 0, 8)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst = c.Match(r, dst[:0])
		for _, rule := range dst {
			buf, _ = rule.AppendKey(buf[:0], r)
			_ = rule.Cost(r)
		}
	}
}

func BenchmarkMatchRegex(b *testing.B) {
	c := mustParse(b, oneRule(`"algorithm":"gcra","limit":1,"window":"1s","match":{"path":{"regex":"/v1/orders/[0-9]+"},"headers":[{"name":"user-agent","regex":"(curl|bench).*"}]}`))
	r := benchRequest()
	dst := make([]*Rule, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		dst = c.Match(r, dst[:0])
	}
	if len(dst) != 1 {
		b.Fatal("regex rule did not match")
	}
}

func BenchmarkParse(b *testing.B) {
	data := []byte(benchConfigJSON)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
