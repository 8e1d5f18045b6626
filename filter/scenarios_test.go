package filter

import "time"

const ms = time.Millisecond

// hdr is shorthand for one request header.
func hdr(k, v string) [2]string { return [2]string{k, v} }

// scenarios are the user-visible behaviours of the filter. Each one runs natively and against
// the compiled module (see runScenario).
var scenarios = []scenario{
	{
		name: "token bucket per client IP on one route",
		config: `{"rules":[{"name":"api-per-ip","match":{"routes":["api"]},
			"key":[{"source":"client_ip"}],
			"algorithm":"token_bucket","limit":3,"window":"1s"}]}`,
		steps: []step{
			{route: "api", wantHeaders: map[string]string{
				"ratelimit-policy": `"api-per-ip";q=3;w=1`, "ratelimit": `"api-per-ip";r=2;t=1`}},
			{route: "api", wantHeaders: map[string]string{"ratelimit": `"api-per-ip";r=1;t=1`}},
			{route: "api", wantHeaders: map[string]string{"ratelimit": `"api-per-ip";r=0;t=1`}},
			{route: "api", want: 429, wantBody: `"rule":"api-per-ip"`, wantHeaders: map[string]string{
				"retry-after": "1", "ratelimit": `"api-per-ip";r=0;t=1`, "content-type": "application/json"}},
			// Another client has its own bucket.
			{route: "api", source: "198.51.100.7:4000", wantHeaders: map[string]string{"ratelimit": `"api-per-ip";r=2;t=1`}},
			// Other routes are not limited by this rule and get no headers.
			{route: "internal", wantHeaders: map[string]string{"ratelimit": "-", "ratelimit-policy": "-"}},
			// One token is back after a third of a second, and not a nanosecond earlier.
			{at: 333 * ms, route: "api", want: 429},
			{at: 334 * ms, route: "api"},
			{at: 334 * ms, route: "api", want: 429},
		},
	},
	{
		name: "login: GCRA on POST /login only, legacy headers",
		config: `{"rate_limit_headers":"legacy","rules":[{"name":"login",
			"match":{"path":{"exact":"/login"},"methods":["POST"]},
			"key":[{"source":"client_ip"}],
			"algorithm":"gcra","limit":2,"window":"1m","burst":2}]}`,
		steps: []step{
			{method: "POST", path: "/login", wantHeaders: map[string]string{
				"x-ratelimit-limit": "2", "x-ratelimit-remaining": "1", "ratelimit": "-"}},
			{method: "POST", path: "/login", wantHeaders: map[string]string{"x-ratelimit-remaining": "0"}},
			{method: "POST", path: "/login", want: 429, wantHeaders: map[string]string{"retry-after": "30"}},
			// GET /login and POST elsewhere are not this rule's business.
			{method: "GET", path: "/login", wantHeaders: map[string]string{"x-ratelimit-limit": "-"}},
			{method: "POST", path: "/login/other", wantHeaders: map[string]string{"x-ratelimit-limit": "-"}},
			{at: 30 * time.Second, method: "POST", path: "/login"},
		},
	},
	{
		name: "per-IP and per-tenant: a request denied by the second rule costs the first nothing",
		config: `{"rules":[
			{"name":"per-ip","continue":true,"key":[{"source":"client_ip"}],
			 "algorithm":"fixed_window","limit":3,"window":"1m"},
			{"name":"per-tenant","key":[{"source":"header","name":"x-tenant"}],
			 "algorithm":"fixed_window","limit":1,"window":"1m"}]}`,
		steps: []step{
			{headers: [][2]string{hdr("x-tenant", "a")}, wantHeaders: map[string]string{
				"ratelimit": `"per-ip";r=2;t=60, "per-tenant";r=0;t=60`}},
			{headers: [][2]string{hdr("x-tenant", "a")}, want: 429, wantBody: `"rule":"per-tenant"`},
			{headers: [][2]string{hdr("x-tenant", "a")}, want: 429},
			// per-ip still has 2 left: the two denials above did not consume it.
			{headers: [][2]string{hdr("x-tenant", "b")}, wantHeaders: map[string]string{
				"ratelimit": `"per-ip";r=1;t=60, "per-tenant";r=0;t=60`}},
			// Without the tenant header the per-tenant rule is skipped (no default).
			{wantHeaders: map[string]string{"ratelimit": `"per-ip";r=0;t=60`}},
			{want: 429, wantBody: `"rule":"per-ip"`},
		},
	},
	{
		name:   "shadow rule decides and counts but never denies",
		config: `{"rules":[{"name":"dry","shadow":true,"algorithm":"fixed_window","limit":1,"window":"1s"}]}`,
		steps: []step{
			{wantHeaders: map[string]string{"ratelimit": `"dry";r=0;t=1`}},
			{wantHeaders: map[string]string{"ratelimit": `"dry";r=0;t=1`}},
		},
	},
	{
		name:   "fixed window: the documented 2x burst at a boundary",
		config: `{"rate_limit_headers":"none","rules":[{"name":"fw","algorithm":"fixed_window","limit":2,"window":"1s"}]}`,
		steps: []step{
			{at: 900 * ms}, {at: 900 * ms}, {at: 950 * ms, want: 429, wantHeaders: map[string]string{"retry-after": "-"}},
			{at: 1000 * ms}, {at: 1000 * ms}, {at: 1000 * ms, want: 429},
		},
	},
	{
		name: "cost from a header, bounded; garbage costs the maximum",
		config: `{"rules":[{"name":"tokens","key":[{"source":"header","name":"x-api-key","default":"anonymous"}],
			"algorithm":"token_bucket","limit":10,"window":"1h",
			"cost":{"header":"x-cost","max":5}}]}`,
		steps: []step{
			{headers: [][2]string{hdr("x-cost", "4")}, wantHeaders: map[string]string{"ratelimit": `"tokens";r=6;t=1440`}},
			{headers: [][2]string{hdr("x-cost", "-3")}, wantHeaders: map[string]string{"ratelimit": `"tokens";r=1;t=3240`}},
			{headers: [][2]string{hdr("x-cost", "2")}, want: 429},
			{wantHeaders: map[string]string{"ratelimit": `"tokens";r=0;t=3600`}},
			// A different API key has its own budget.
			{headers: [][2]string{hdr("x-api-key", "k2"), hdr("x-cost", "5")}, wantHeaders: map[string]string{"ratelimit": `"tokens";r=5;t=1800`}},
		},
	},
	{
		name: "sliding window log: exact, retry after the oldest request leaves the window",
		config: `{"rules":[{"name":"log","algorithm":"sliding_window","variant":"log","limit":2,"window":"10s",
			"deny":{"status":503,"body":"slow down, retry in %RETRY_AFTER%s","headers":{"x-why":"rate"}}}]}`,
		steps: []step{
			{at: 0}, {at: 4 * time.Second},
			{at: 9 * time.Second, want: 503, wantBody: "slow down, retry in 1s", wantHeaders: map[string]string{
				"x-why": "rate", "retry-after": "1", "content-type": "text/plain"}},
			{at: 10 * time.Second},
			{at: 10 * time.Second, want: 503, wantHeaders: map[string]string{"retry-after": "4"}},
			{at: 14 * time.Second},
		},
	},
	{
		// Issue 11: the policy used to round the window to whole seconds (5 per 500ms was
		// q=5;w=1, 3 per 1.5s was q=3;w=1). q/w must be the rule's rate exactly.
		name: "RateLimit-Policy states each rule's rate exactly",
		config: `{"rules":[
			{"name":"half","continue":true,"algorithm":"fixed_window","limit":5,"window":"500ms"},
			{"name":"third","continue":true,"algorithm":"token_bucket","limit":3,"window":"1500ms"},
			{"name":"odd","continue":true,"algorithm":"gcra","limit":7,"window":"1300ms"},
			{"name":"minute","algorithm":"sliding_window","limit":100,"window":"1m"}]}`,
		steps: []step{
			{wantHeaders: map[string]string{"ratelimit-policy": `"half";q=10;w=1, "third";q=2;w=1, "odd";q=70;w=13, "minute";q=100;w=60`}},
			{}, {},
			// "third" (3 per 1.5s) denies the fourth request, and its policy says 2 per second.
			{want: 429, wantBody: `"rule":"third"`, wantHeaders: map[string]string{
				"ratelimit-policy": `"third";q=2;w=1`, "retry-after": "1"}},
		},
	},
	{
		// Issue 11: keyed on x-api-key, a request with two x-api-key headers was keyed on the
		// first while the upstream could read the other; rotating the first got 10 of 10
		// through a limit of 3. A repeated key header is now refused with 400.
		name: "a repeated key header is refused, not keyed on one of its values",
		config: `{"rules":[{"name":"per-key","key":[{"source":"header","name":"x-api-key"}],
			"algorithm":"fixed_window","limit":3,"window":"1h"}]}`,
		steps: []step{
			{headers: [][2]string{hdr("x-api-key", "rnd1"), hdr("x-api-key", "real")}, want: 400,
				wantBody: `"header":"x-api-key"`, wantHeaders: map[string]string{"content-type": "application/json"}},
			{headers: [][2]string{hdr("x-api-key", "rnd2"), hdr("x-api-key", "real")}, want: 400},
			{headers: [][2]string{hdr("x-api-key", "real")}},
			{headers: [][2]string{hdr("x-api-key", "real")}},
			{headers: [][2]string{hdr("x-api-key", "real")}},
			{headers: [][2]string{hdr("x-api-key", "rnd3"), hdr("x-api-key", "real")}, want: 400},
			{headers: [][2]string{hdr("x-api-key", "real")}, want: 429},
		},
	},
	{
		name: "on_duplicate last keys on the line the upstream reads; first on the other",
		config: `{"rules":[
			{"name":"last","continue":true,"key":[{"source":"header","name":"x-api-key","on_duplicate":"last"}],
			 "algorithm":"fixed_window","limit":2,"window":"1h"},
			{"name":"first","key":[{"source":"header","name":"x-tenant","on_duplicate":"first"}],
			 "algorithm":"fixed_window","limit":3,"window":"1h"}]}`,
		steps: []step{
			{headers: [][2]string{hdr("x-api-key", "rnd1"), hdr("x-api-key", "real"), hdr("x-tenant", "t"), hdr("x-tenant", "x1")},
				wantHeaders: map[string]string{"ratelimit": `"last";r=1;t=3600, "first";r=2;t=3600`}},
			{headers: [][2]string{hdr("x-api-key", "rnd2"), hdr("x-api-key", "real"), hdr("x-tenant", "t"), hdr("x-tenant", "x2")},
				wantHeaders: map[string]string{"ratelimit": `"last";r=0;t=3600, "first";r=1;t=3600`}},
			// Rotating the first x-api-key line does not escape: the key is the last one.
			{headers: [][2]string{hdr("x-api-key", "rnd3"), hdr("x-api-key", "real"), hdr("x-tenant", "u")},
				want: 429, wantBody: `"rule":"last"`},
			{headers: [][2]string{hdr("x-api-key", "other"), hdr("x-tenant", "t"), hdr("x-tenant", "x3")},
				wantHeaders: map[string]string{"ratelimit": `"last";r=1;t=3600, "first";r=0;t=3600`}},
		},
	},
	{
		name: "X-Forwarded-For is trusted only as far as configured",
		config: `{"trusted_hops":1,"rules":[{"name":"xff","key":[{"source":"client_ip"}],
			"algorithm":"fixed_window","limit":1,"window":"1m"}]}`,
		steps: []step{
			{headers: [][2]string{hdr("x-forwarded-for", "203.0.113.9")}},
			// A client cannot escape by prepending addresses: the right-most entry is used.
			{headers: [][2]string{hdr("x-forwarded-for", "1.1.1.1, 203.0.113.9")}, want: 429},
			{headers: [][2]string{hdr("x-forwarded-for", "203.0.113.10")}},
		},
	},
}
