package filtertest

import "github.com/ratelimit-wasm/ratelimit/filter/config"

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
