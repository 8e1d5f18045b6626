package filtertest

import (
	"fmt"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// FreshVerdict is what the filter must answer req, judged on an uncached request: 400 naming
// the first matched rule with a repeated key part; else 429 naming the first matched rule
// whose key is in seen (nothing charged); else 0 (through), with every matched rule's key
// added to seen. Keys in seen are "rule|key". It models rules that each admit one request per
// key and never refill, so the tests that reuse one request view (natively and in the compiled
// module) can check each request against what a fresh one would get.
func FreshVerdict(cfg *config.Config, req config.Request, seen map[string]bool) (status int, rule string) {
	matched := cfg.Match(req, nil)
	for _, r := range matched {
		if _, dup := r.DuplicatePart(req); dup {
			return 400, r.Name
		}
	}
	var keys []string
	for _, r := range matched {
		key, ok := r.AppendKey(nil, req)
		if !ok {
			continue
		}
		if seen[r.Name+"|"+string(key)] {
			return 429, r.Name
		}
		keys = append(keys, r.Name+"|"+string(key))
	}
	for _, k := range keys {
		seen[k] = true
	}
	return 0, ""
}

// ReuseConfig is the configuration of the reuse tests: five rules keyed on the client IP
// (whole and by prefix), a header, a query parameter and X-Forwarded-For (repeated lines
// handled as onDupXFF says), each admitting one request per key for an hour, with trustedHops
// trusted proxies.
func ReuseConfig(trustedHops int, onDupXFF string) string {
	const limit = `"algorithm":"fixed_window","limit":1,"window":"1h"`
	return fmt.Sprintf(`{"trusted_hops":%[3]d,"rules":[
		{"name":"ip","continue":true,"key":[{"source":"client_ip"}],%[1]s},
		{"name":"net","continue":true,"match":{"methods":["GET"]},"key":[{"source":"client_ip","ipv4_prefix":24,"ipv6_prefix":64},{"source":"header","name":"x-k","default":"none"}],%[1]s},
		{"name":"hdr","continue":true,"key":[{"source":"header","name":"x-k"},{"source":"query","name":"q","default":"-"}],%[1]s},
		{"name":"xff","continue":true,"match":{"path":{"prefix":"/a"}},"key":[{"source":"header","name":"x-forwarded-for","on_duplicate":"%[2]s"},{"source":"client_ip"}],%[1]s},
		{"name":"last","key":[{"source":"query","name":"q","on_duplicate":"last"},{"source":"header","name":"x-k","on_duplicate":"first","default":"-"}],%[1]s}]}`,
		limit, onDupXFF, trustedHops)
}

// ReuseSources are the source addresses of the reuse tests, of every shape the filter parses:
// IPv4 and IPv6 with and without a port, IPv4-mapped, with a zone, and unparsable.
var ReuseSources = []string{"192.0.2.1:5555", "192.0.2.1", "192.0.2.77:80", "[2001:db8::1]:443", "2001:db8::1",
	"[2001:DB8::2]:1", "[::ffff:192.0.2.9]:7", "[fe80::1%eth0]:1", "garbage", "-", "198.51.100.3"}

// ReuseForwardedFor are the X-Forwarded-For values of the reuse tests.
var ReuseForwardedFor = []string{"203.0.113.5", "203.0.113.5, 2001:db8::9", "garbage", "", "[2001:db8::3]:5", "198.51.100.3:80"}
