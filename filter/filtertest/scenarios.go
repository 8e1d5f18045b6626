package filtertest

import "time"

const ms = time.Millisecond

// hdr is shorthand for one request header.
func hdr(k, v string) [2]string { return [2]string{k, v} }

// Scenarios are the user-visible behaviours of the filter. Each one runs natively and against
// the compiled module (see Run).
var Scenarios = []Scenario{
	{
		Name: "token bucket per client IP on one route",
		Config: `{"rules":[{"name":"api-per-ip","match":{"routes":["api"]},
			"key":[{"source":"client_ip"}],
			"algorithm":"token_bucket","limit":3,"window":"1s"}]}`,
		Steps: []Step{
			{Route: "api", WantHeaders: map[string]string{
				"ratelimit-policy": `"api-per-ip";q=3;w=1`, "ratelimit": `"api-per-ip";r=2;t=1`}},
			{Route: "api", WantHeaders: map[string]string{"ratelimit": `"api-per-ip";r=1;t=1`}},
			{Route: "api", WantHeaders: map[string]string{"ratelimit": `"api-per-ip";r=0;t=1`}},
			{Route: "api", Want: 429, WantBody: `"rule":"api-per-ip"`, WantHeaders: map[string]string{
				"retry-after": "1", "ratelimit": `"api-per-ip";r=0;t=1`, "content-type": "application/json"}},
			// Another client has its own bucket.
			{Route: "api", Source: "198.51.100.7:4000", WantHeaders: map[string]string{"ratelimit": `"api-per-ip";r=2;t=1`}},
			// Other routes are not limited by this rule and get no headers.
			{Route: "internal", WantHeaders: map[string]string{"ratelimit": "-", "ratelimit-policy": "-"}},
			// One token is back after a third of a second, and not a nanosecond earlier.
			{At: 333 * ms, Route: "api", Want: 429},
			{At: 334 * ms, Route: "api"},
			{At: 334 * ms, Route: "api", Want: 429},
		},
	},
	{
		Name: "login: GCRA on POST /login only, legacy headers",
		Config: `{"rate_limit_headers":"legacy","rules":[{"name":"login",
			"match":{"path":{"exact":"/login"},"methods":["POST"]},
			"key":[{"source":"client_ip"}],
			"algorithm":"gcra","limit":2,"window":"1m","burst":2}]}`,
		Steps: []Step{
			{Method: "POST", Path: "/login", WantHeaders: map[string]string{
				"x-ratelimit-limit": "2", "x-ratelimit-remaining": "1", "ratelimit": "-"}},
			{Method: "POST", Path: "/login", WantHeaders: map[string]string{"x-ratelimit-remaining": "0"}},
			{Method: "POST", Path: "/login", Want: 429, WantHeaders: map[string]string{"retry-after": "30"}},
			// GET /login and POST elsewhere are not this rule's business.
			{Method: "GET", Path: "/login", WantHeaders: map[string]string{"x-ratelimit-limit": "-"}},
			{Method: "POST", Path: "/login/other", WantHeaders: map[string]string{"x-ratelimit-limit": "-"}},
			{At: 30 * time.Second, Method: "POST", Path: "/login"},
		},
	},
	{
		Name: "per-IP and per-tenant: a request denied by the second rule costs the first nothing",
		Config: `{"rules":[
			{"name":"per-ip","continue":true,"key":[{"source":"client_ip"}],
			 "algorithm":"fixed_window","limit":3,"window":"1m"},
			{"name":"per-tenant","key":[{"source":"header","name":"x-tenant"}],
			 "algorithm":"fixed_window","limit":1,"window":"1m"}]}`,
		Steps: []Step{
			{Headers: [][2]string{hdr("x-tenant", "a")}, WantHeaders: map[string]string{
				"ratelimit": `"per-ip";r=2;t=60, "per-tenant";r=0;t=60`}},
			{Headers: [][2]string{hdr("x-tenant", "a")}, Want: 429, WantBody: `"rule":"per-tenant"`},
			{Headers: [][2]string{hdr("x-tenant", "a")}, Want: 429},
			// per-ip still has 2 left: the two denials above did not consume it.
			{Headers: [][2]string{hdr("x-tenant", "b")}, WantHeaders: map[string]string{
				"ratelimit": `"per-ip";r=1;t=60, "per-tenant";r=0;t=60`}},
			// Without the tenant header the per-tenant rule is skipped (no default).
			{WantHeaders: map[string]string{"ratelimit": `"per-ip";r=0;t=60`}},
			{Want: 429, WantBody: `"rule":"per-ip"`},
		},
	},
	{
		// A shadow rule's headers must not reach clients, which would slow down for a limit
		// nobody enforces, and the upstream is told of a would-be denial.
		Name: "shadow rule never denies, sends clients no headers, tells the upstream of a would-be denial",
		Config: `{"rules":[{"name":"dry","shadow":true,"shadow_request_header":"x-ratelimit-shadow-denied",
			"algorithm":"fixed_window","limit":1,"window":"1s"}]}`,
		Steps: []Step{
			{WantHeaders: map[string]string{"ratelimit": "-", "ratelimit-policy": "-", "x-ratelimit-limit": "-"},
				WantUpstreamHeaders: map[string]string{"x-ratelimit-shadow-denied": "-"}},
			{WantHeaders: map[string]string{"ratelimit": "-", "ratelimit-policy": "-"},
				WantUpstreamHeaders: map[string]string{"x-ratelimit-shadow-denied": "dry"}},
			// A client cannot forge the verdict: its copy is removed, whether the rule
			// would deny or not, and only the filter's reaches the upstream.
			{Headers: [][2]string{hdr("x-ratelimit-shadow-denied", "forged")},
				WantUpstreamHeaders: map[string]string{"x-ratelimit-shadow-denied": "dry"}},
			{At: 1100 * ms, Headers: [][2]string{hdr("x-ratelimit-shadow-denied", "forged")},
				WantUpstreamHeaders: map[string]string{"x-ratelimit-shadow-denied": "-"}},
		},
	},
	{
		Name: "shadow rule with shadow_headers: its headers reach clients, beside an enforced rule's",
		Config: `{"rate_limit_headers":"both","rules":[
			{"name":"dry","continue":true,"shadow":true,"shadow_headers":true,"algorithm":"fixed_window","limit":1,"window":"1s"},
			{"name":"quiet","continue":true,"shadow":true,"algorithm":"fixed_window","limit":1,"window":"1s"},
			{"name":"real","algorithm":"fixed_window","limit":5,"window":"1s"}]}`,
		Steps: []Step{
			{WantHeaders: map[string]string{"ratelimit": `"dry";r=0;t=1, "real";r=4;t=1`, "x-ratelimit-remaining": "0"}},
			{WantHeaders: map[string]string{"ratelimit": `"dry";r=0;t=1, "real";r=3;t=1`}},
		},
	},
	{
		// Envoy's rate-limit filters mark a denial with x-envoy-ratelimited (the
		// router's envoy-ratelimited retry policy reads it) and answer gRPC clients with a
		// grpc-status rather than an HTTP 429 with a JSON body.
		Name:   "deny like Envoy: x-envoy-ratelimited on 429, gRPC gets RESOURCE_EXHAUSTED without a body",
		Config: `{"rules":[{"name":"one","algorithm":"fixed_window","limit":1,"window":"1s"}]}`,
		Steps: []Step{
			{WantHeaders: map[string]string{"x-envoy-ratelimited": "-"}},
			{Want: 429, WantBody: `"rule":"one"`, WantHeaders: map[string]string{
				"x-envoy-ratelimited": "true", "content-type": "application/json"}},
			{Method: "POST", Path: "/pkg.Svc/Call", Headers: [][2]string{hdr("content-type", "application/grpc")},
				Want: 429, WantGrpcStatus: 8, WantNoBody: true, WantHeaders: map[string]string{
					"x-envoy-ratelimited": "true", "content-type": "-", "retry-after": "1"}},
			{Method: "POST", Path: "/pkg.Svc/Call", Headers: [][2]string{hdr("content-type", "application/grpc+proto")},
				Want: 429, WantGrpcStatus: 8, WantNoBody: true},
			// application/grpc-web is not gRPC over HTTP/2: its clients read HTTP statuses.
			{Method: "POST", Path: "/pkg.Svc/Call", Headers: [][2]string{hdr("content-type", "application/grpc-web")},
				Want: 429, WantGrpcStatus: -1, WantBody: `"rule":"one"`},
			{Method: "POST", Path: "/pkg.Svc/Call", Headers: [][2]string{hdr("content-type", "application/grpc-web+proto")},
				Want: 429, WantGrpcStatus: -1, WantBody: `"rule":"one"`},
			{Method: "POST", Path: "/pkg.Svc/Call", Headers: [][2]string{hdr("content-type", "application/grpc+json")},
				Want: 429, WantGrpcStatus: 8, WantNoBody: true},
			// Envoy's test (Grpc::Common::hasGrpcContentType) is exactly application/grpc or a
			// '+' suffix, compared case-sensitively: for anything else it ignores the grpc_status
			// of a local reply and sends the HTTP response, so the filter must send that one
			// whole, with its content-type and body, not an empty 429.
			{Method: "POST", Path: "/pkg.Svc/Call", Headers: [][2]string{hdr("content-type", "application/grpcx")},
				Want: 429, WantGrpcStatus: -1, WantBody: `"rule":"one"`},
			{Method: "POST", Path: "/pkg.Svc/Call", Headers: [][2]string{hdr("content-type", "application/grpc;charset=utf-8")},
				Want: 429, WantGrpcStatus: -1, WantBody: `"rule":"one"`, WantHeaders: map[string]string{"content-type": "application/json"}},
			{Method: "POST", Path: "/pkg.Svc/Call", Headers: [][2]string{hdr("content-type", "Application/gRPC")},
				Want: 429, WantGrpcStatus: -1, WantBody: `"rule":"one"`},
		},
	},
	{
		// As envoyproxy/ratelimit users do, descriptor values get their own limit (API-key
		// tiers, an unlimited internal key).
		Name: "per-value overrides: an exact key and a prefix have their own limits, an unlimited key none",
		Config: `{"rules":[{"name":"per-key","key":[{"source":"header","name":"x-api-key"}],
			"algorithm":"fixed_window","limit":1,"window":"1m",
			"overrides":[{"exact":"internal","unlimited":true},
			             {"prefix":"gold-","limit":3},
			             {"prefix":"gold-vip-","limit":5,"window":"1s"},
			             {"exact":"gold-x","limit":2}]}]}`,
		Steps: []Step{
			// An ordinary key: the rule's limit of 1.
			{Headers: [][2]string{hdr("x-api-key", "free")}, WantHeaders: map[string]string{
				"ratelimit-policy": `"per-key";q=1;w=60`, "ratelimit": `"per-key";r=0;t=60`}},
			{Headers: [][2]string{hdr("x-api-key", "free")}, Want: 429},
			// A gold key: 3, and its policy says so.
			{Headers: [][2]string{hdr("x-api-key", "gold-a")}, WantHeaders: map[string]string{
				"ratelimit-policy": `"per-key";q=3;w=60`, "ratelimit": `"per-key";r=2;t=60`}},
			{Headers: [][2]string{hdr("x-api-key", "gold-a")}},
			{Headers: [][2]string{hdr("x-api-key", "gold-a")}, WantHeaders: map[string]string{"ratelimit": `"per-key";r=0;t=60`}},
			{Headers: [][2]string{hdr("x-api-key", "gold-a")}, Want: 429},
			// Each gold key has its own count of 3: a prefix is a tier, not a shared bucket.
			{Headers: [][2]string{hdr("x-api-key", "gold-b")}, WantHeaders: map[string]string{"ratelimit": `"per-key";r=2;t=60`}},
			// The longest prefix wins, and an exact value wins over every prefix.
			{Headers: [][2]string{hdr("x-api-key", "gold-vip-1")}, WantHeaders: map[string]string{
				"ratelimit-policy": `"per-key";q=5;w=1`, "ratelimit": `"per-key";r=4;t=1`}},
			{Headers: [][2]string{hdr("x-api-key", "gold-x")}, WantHeaders: map[string]string{
				"ratelimit-policy": `"per-key";q=2;w=60`, "ratelimit": `"per-key";r=1;t=60`}},
			// The unlimited key is never limited and gets no headers.
			{Headers: [][2]string{hdr("x-api-key", "internal")}, WantHeaders: map[string]string{"ratelimit": "-"}},
			{Headers: [][2]string{hdr("x-api-key", "internal")}},
			{Headers: [][2]string{hdr("x-api-key", "internal")}},
			// "internalx" is not "internal": the rule's limit.
			{Headers: [][2]string{hdr("x-api-key", "internalx")}},
			{Headers: [][2]string{hdr("x-api-key", "internalx")}, Want: 429},
		},
	},
	{
		Name: "deny: gRPC status 14 and no x-envoy-ratelimited when configured",
		Config: `{"deny":{"grpc_status":14,"envoy_ratelimited_header":false},
			"rules":[{"name":"one","algorithm":"fixed_window","limit":1,"window":"1s"}]}`,
		Steps: []Step{
			{},
			{Headers: [][2]string{hdr("content-type", "application/grpc")},
				Want: 429, WantGrpcStatus: 14, WantNoBody: true, WantHeaders: map[string]string{"x-envoy-ratelimited": "-"}},
			{Want: 429, WantGrpcStatus: -1, WantHeaders: map[string]string{"x-envoy-ratelimited": "-"}},
		},
	},
	{
		Name:   "fixed window: the documented 2x burst at a boundary",
		Config: `{"rate_limit_headers":"none","rules":[{"name":"fw","algorithm":"fixed_window","limit":2,"window":"1s"}]}`,
		Steps: []Step{
			{At: 900 * ms}, {At: 900 * ms}, {At: 950 * ms, Want: 429, WantHeaders: map[string]string{"retry-after": "-"}},
			{At: 1000 * ms}, {At: 1000 * ms}, {At: 1000 * ms, Want: 429},
		},
	},
	{
		Name: "cost from a header, bounded; garbage costs the maximum",
		Config: `{"rules":[{"name":"tokens","key":[{"source":"header","name":"x-api-key","default":"anonymous"}],
			"algorithm":"token_bucket","limit":10,"window":"1h",
			"cost":{"header":"x-cost","max":5}}]}`,
		Steps: []Step{
			{Headers: [][2]string{hdr("x-cost", "4")}, WantHeaders: map[string]string{"ratelimit": `"tokens";r=6;t=1440`}},
			{Headers: [][2]string{hdr("x-cost", "-3")}, WantHeaders: map[string]string{"ratelimit": `"tokens";r=1;t=3240`}},
			{Headers: [][2]string{hdr("x-cost", "2")}, Want: 429},
			{WantHeaders: map[string]string{"ratelimit": `"tokens";r=0;t=3600`}},
			// A different API key has its own budget.
			{Headers: [][2]string{hdr("x-api-key", "k2"), hdr("x-cost", "5")}, WantHeaders: map[string]string{"ratelimit": `"tokens";r=5;t=1800`}},
			// Two lines are several values, whichever comes first: charged max.
			{Headers: [][2]string{hdr("x-api-key", "k3"), hdr("x-cost", "1"), hdr("x-cost", "5")}, WantHeaders: map[string]string{"ratelimit": `"tokens";r=5;t=1800`}},
		},
	},
	{
		// Envoy's single-value lookup answers the first of several header lines; a trusted
		// component that adds the cost after the client's own (request_headers_to_add
		// appends) must not leave the client's value in charge. A rule without a header key
		// reads the request's header map only for a request that carries the cost header.
		Name: "a cost header on several lines costs the maximum, as several values on one line do",
		Config: `{"rules":[{"name":"c","algorithm":"fixed_window","limit":20,"window":"1m",
			"cost":{"header":"x-cost","default":1,"max":5}}]}`,
		Steps: []Step{
			{Headers: [][2]string{hdr("x-cost", "1")}, WantHeaders: map[string]string{"ratelimit": `"c";r=19;t=60`}},
			{Headers: [][2]string{hdr("x-cost", "1"), hdr("x-cost", "5")}, WantHeaders: map[string]string{"ratelimit": `"c";r=14;t=60`}},
			{Headers: [][2]string{hdr("x-cost", "5"), hdr("x-cost", "1")}, WantHeaders: map[string]string{"ratelimit": `"c";r=9;t=60`}},
			{Headers: [][2]string{hdr("x-cost", "1,1")}, WantHeaders: map[string]string{"ratelimit": `"c";r=4;t=60`}},
			{WantHeaders: map[string]string{"ratelimit": `"c";r=3;t=60`}},
			{Headers: [][2]string{hdr("x-cost", "2")}, WantHeaders: map[string]string{"ratelimit": `"c";r=1;t=60`}},
		},
	},
	{
		// A usage cost's reserve header is read as a cost header: two lines reserve max.
		Name: "a usage cost's reserve header on several lines reserves the maximum",
		Config: `{"rules":[{"name":"u","algorithm":"token_bucket","limit":1000,"window":"1h",
			"cost":{"reserve":{"header":"x-max-tokens","default":10,"max":500},"usage":{"header":"x-usage"},"max":500}}]}`,
		Steps: []Step{
			{Headers: [][2]string{hdr("x-max-tokens", "1"), hdr("x-max-tokens", "500")}, WantHeaders: map[string]string{"ratelimit": `"u";r=500;t=1800`}},
			{Headers: [][2]string{hdr("x-max-tokens", "1")}, WantHeaders: map[string]string{"ratelimit": `"u";r=499;t=1804`}},
		},
	},
	{
		Name: "sliding window log: exact, retry after the oldest request leaves the window",
		Config: `{"rules":[{"name":"log","algorithm":"sliding_window","variant":"log","limit":2,"window":"10s",
			"deny":{"status":503,"body":"slow down, retry in %RETRY_AFTER%s","headers":{"x-why":"rate"}}}]}`,
		Steps: []Step{
			{At: 0}, {At: 4 * time.Second},
			{At: 9 * time.Second, Want: 503, WantBody: "slow down, retry in 1s", WantHeaders: map[string]string{
				"x-why": "rate", "retry-after": "1", "content-type": "text/plain"}},
			{At: 10 * time.Second},
			{At: 10 * time.Second, Want: 503, WantHeaders: map[string]string{"retry-after": "4"}},
			{At: 14 * time.Second},
		},
	},
	{
		// The policy must not round the window to whole seconds (5 per 500ms as q=5;w=1, 3 per
		// 1.5s as q=3;w=1): q/w is the rule's rate exactly.
		Name: "RateLimit-Policy states each rule's rate exactly",
		Config: `{"rules":[
			{"name":"half","continue":true,"algorithm":"fixed_window","limit":5,"window":"500ms"},
			{"name":"third","continue":true,"algorithm":"token_bucket","limit":3,"window":"1500ms"},
			{"name":"odd","continue":true,"algorithm":"gcra","limit":7,"window":"1300ms"},
			{"name":"minute","algorithm":"sliding_window","limit":100,"window":"1m"}]}`,
		Steps: []Step{
			{WantHeaders: map[string]string{"ratelimit-policy": `"half";q=10;w=1, "third";q=2;w=1, "odd";q=70;w=13, "minute";q=100;w=60`}},
			{}, {},
			// "third" (3 per 1.5s) denies the fourth request, and its policy says 2 per second.
			{Want: 429, WantBody: `"rule":"third"`, WantHeaders: map[string]string{
				"ratelimit-policy": `"third";q=2;w=1`, "retry-after": "1"}},
		},
	},
	{
		// Keyed on x-api-key, a request with two x-api-key headers keyed on the first while
		// the upstream reads the other would let a client rotating the first through any
		// limit. A repeated key header is refused with 400.
		Name: "a repeated key header is refused, not keyed on one of its values",
		Config: `{"rules":[{"name":"per-key","key":[{"source":"header","name":"x-api-key"}],
			"algorithm":"fixed_window","limit":3,"window":"1h"}]}`,
		Steps: []Step{
			{Headers: [][2]string{hdr("x-api-key", "rnd1"), hdr("x-api-key", "real")}, Want: 400,
				WantBody: `"header":"x-api-key"`, WantHeaders: map[string]string{"content-type": "application/json"}},
			{Headers: [][2]string{hdr("x-api-key", "rnd2"), hdr("x-api-key", "real")}, Want: 400},
			{Headers: [][2]string{hdr("x-api-key", "real")}},
			{Headers: [][2]string{hdr("x-api-key", "real")}},
			{Headers: [][2]string{hdr("x-api-key", "real")}},
			{Headers: [][2]string{hdr("x-api-key", "rnd3"), hdr("x-api-key", "real")}, Want: 400},
			{Headers: [][2]string{hdr("x-api-key", "real")}, Want: 429},
		},
	},
	{
		Name: "on_duplicate last keys on the line the upstream reads; first on the other",
		Config: `{"rules":[
			{"name":"last","continue":true,"key":[{"source":"header","name":"x-api-key","on_duplicate":"last"}],
			 "algorithm":"fixed_window","limit":2,"window":"1h"},
			{"name":"first","key":[{"source":"header","name":"x-tenant","on_duplicate":"first"}],
			 "algorithm":"fixed_window","limit":3,"window":"1h"}]}`,
		Steps: []Step{
			{Headers: [][2]string{hdr("x-api-key", "rnd1"), hdr("x-api-key", "real"), hdr("x-tenant", "t"), hdr("x-tenant", "x1")},
				WantHeaders: map[string]string{"ratelimit": `"last";r=1;t=3600, "first";r=2;t=3600`}},
			{Headers: [][2]string{hdr("x-api-key", "rnd2"), hdr("x-api-key", "real"), hdr("x-tenant", "t"), hdr("x-tenant", "x2")},
				WantHeaders: map[string]string{"ratelimit": `"last";r=0;t=3600, "first";r=1;t=3600`}},
			// Rotating the first x-api-key line does not escape: the key is the last one.
			{Headers: [][2]string{hdr("x-api-key", "rnd3"), hdr("x-api-key", "real"), hdr("x-tenant", "u")},
				Want: 429, WantBody: `"rule":"last"`},
			{Headers: [][2]string{hdr("x-api-key", "other"), hdr("x-tenant", "t"), hdr("x-tenant", "x3")},
				WantHeaders: map[string]string{"ratelimit": `"last";r=1;t=3600, "first";r=0;t=3600`}},
		},
	},
	{
		// A repeated query parameter is the same ambiguity as a repeated header: keyed on the
		// first, "?key=rnd&key=real" would rotate past the limit of an upstream that reads
		// the last. Refused with 400 by default; on_duplicate picks the one to key on.
		Name: "a repeated key query parameter is refused, or keyed on the one on_duplicate names",
		Config: `{"rules":[
			{"name":"per-key","match":{"path":{"prefix":"/a"}},"key":[{"source":"query","name":"key"}],
			 "algorithm":"fixed_window","limit":2,"window":"1h"},
			{"name":"last","key":[{"source":"query","name":"key","on_duplicate":"last"}],
			 "algorithm":"fixed_window","limit":1,"window":"1h"}]}`,
		Steps: []Step{
			{Path: "/a?key=rnd1&key=real", Want: 400, WantBody: `"parameter":"key"`,
				WantHeaders: map[string]string{"content-type": "application/json"}},
			{Path: "/a?key=rnd2&%6Bey=real", Want: 400, WantBody: `{"error":"duplicate_query_parameter","rule":"per-key"`},
			{Path: "/a?key=real"},
			{Path: "/a?key=real"},
			{Path: "/a?key=rnd3&key=real", Want: 400},
			{Path: "/a?key=real", Want: 429},
			// Under "last", the last one is the key: rotating the first does not escape.
			{Path: "/b?key=rnd1&key=real"},
			{Path: "/b?key=rnd2&key=real", Want: 429, WantBody: `"rule":"last"`},
		},
	},
	{
		// The legacy fields hold one rule. On a tie in remaining the rule that stays at that
		// count longer is the more restrictive one: naming the other told a client with
		// nothing left to come back after 1 s, where the minute rule denied it for 59 s more.
		Name: "legacy headers: of two rules with nothing left, the one that refills later",
		Config: `{"rate_limit_headers":"legacy","rules":[
			{"name":"second","continue":true,"algorithm":"fixed_window","limit":1,"window":"1s"},
			{"name":"minute","algorithm":"fixed_window","limit":1,"window":"1m"}]}`,
		Steps: []Step{
			{WantHeaders: map[string]string{"x-ratelimit-limit": "1", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "60"}},
			{At: 1 * time.Second, Want: 429, WantBody: `"rule":"minute"`, WantHeaders: map[string]string{"retry-after": "59"}},
		},
	},
	{
		// The same tie the other way round: the later rule refills sooner, the first one
		// must be named, whatever the order.
		Name: "legacy headers: a tie in remaining names the later refill, in either order",
		Config: `{"rate_limit_headers":"legacy","rules":[
			{"name":"minute","continue":true,"algorithm":"fixed_window","limit":2,"window":"1m"},
			{"name":"second","algorithm":"fixed_window","limit":2,"window":"1s"}]}`,
		Steps: []Step{
			{WantHeaders: map[string]string{"x-ratelimit-limit": "2", "x-ratelimit-remaining": "1", "x-ratelimit-reset": "60"}},
		},
	},
	{
		// A request that several enforced rules deny states the longest of their waits: a
		// client that came back when the first denying rule said would be denied again by
		// the other. A shadow rule's wait is not stated.
		Name: "two rules deny: Retry-After is the longer wait, a shadow rule's left out",
		Config: `{"rules":[
			{"name":"day","continue":true,"shadow":true,"algorithm":"fixed_window","limit":1,"window":"24h"},
			{"name":"second","continue":true,"algorithm":"fixed_window","limit":1,"window":"1s"},
			{"name":"hour","algorithm":"fixed_window","limit":2,"window":"1h"}]}`,
		Steps: []Step{
			{},
			{At: 100 * ms, Want: 429, WantBody: `"rule":"second"`, WantHeaders: map[string]string{"retry-after": "1"}},
			{At: 1000 * ms},
			{At: 1100 * ms, Want: 429, WantBody: `"rule":"hour"`, WantHeaders: map[string]string{"retry-after": "3599"}},
		},
	},
	{
		Name: "X-Forwarded-For is trusted only as far as configured",
		Config: `{"trusted_hops":1,"rules":[{"name":"xff","key":[{"source":"client_ip"}],
			"algorithm":"fixed_window","limit":1,"window":"1m"}]}`,
		Steps: []Step{
			{Headers: [][2]string{hdr("x-forwarded-for", "203.0.113.9")}},
			// A client cannot escape by prepending addresses: the right-most entry is used.
			{Headers: [][2]string{hdr("x-forwarded-for", "1.1.1.1, 203.0.113.9")}, Want: 429},
			{Headers: [][2]string{hdr("x-forwarded-for", "203.0.113.10")}},
		},
	},
	{
		// With filter_state, a decided request carries its deciding rule and decision as
		// properties, which Envoy's access log reads with %FILTER_STATE(wasm.<name>:PLAIN)%:
		// the most restrictive of the rules that admitted it, the first that would have
		// denied it (a shadow rule, or a denial enforce_percent left unenforced), or the rule
		// that denied it.
		Name: "filter_state: the deciding rule and the decision, for the access log",
		Config: `{"filter_state":true,"rules":[
			{"name":"wide","continue":true,"algorithm":"fixed_window","limit":10,"window":"1m"},
			{"name":"dry","continue":true,"shadow":true,"algorithm":"fixed_window","limit":2,"window":"1m"},
			{"name":"tight","enforce_percent":50,"algorithm":"fixed_window","limit":3,"window":"1m"}]}`,
		Steps: []Step{
			{WantFilterState: map[string]string{"ratelimit.rule": "dry", "ratelimit.decision": "allowed"}},
			{WantFilterState: map[string]string{"ratelimit.rule": "dry", "ratelimit.decision": "allowed"}},
			{WantFilterState: map[string]string{"ratelimit.rule": "dry", "ratelimit.decision": "shadow_denied"}},
			// "a" is outside tight's 50%: tight would deny it, dry first.
			{Headers: [][2]string{hdr("x-request-id", "a")}, WantFilterState: map[string]string{"ratelimit.rule": "dry", "ratelimit.decision": "shadow_denied"}},
			// "f" is inside it: tight denies.
			{Headers: [][2]string{hdr("x-request-id", "f")}, Want: 429, WantFilterState: map[string]string{"ratelimit.rule": "tight", "ratelimit.decision": "denied"}},
		},
	},
	{
		Name: "filter_state: the rule that admitted the request with the least remaining",
		Config: `{"filter_state":true,"rules":[
			{"name":"wide","continue":true,"algorithm":"fixed_window","limit":10,"window":"1m"},
			{"name":"narrow","continue":true,"algorithm":"fixed_window","limit":5,"window":"1m"},
			{"name":"other","algorithm":"fixed_window","limit":8,"window":"1m"}]}`,
		Steps: []Step{
			{WantFilterState: map[string]string{"ratelimit.rule": "narrow", "ratelimit.decision": "allowed"}},
		},
	},
	{
		// A denial states the longest wait among the rules that deny the request and enforce
		// the denial on it: "a" is outside the hour rule's 50%, so its denial tells the client
		// the second rule's wait; "f" is inside, so the hour's.
		Name: "enforce_percent: an unenforced denial states no wait",
		Config: `{"rules":[
			{"name":"second","continue":true,"algorithm":"fixed_window","limit":1,"window":"1s"},
			{"name":"hour","enforce_percent":50,"algorithm":"fixed_window","limit":1,"window":"1h"}]}`,
		Steps: []Step{
			{Headers: [][2]string{hdr("x-request-id", "g")}},
			{Headers: [][2]string{hdr("x-request-id", "a")}, Want: 429, WantBody: `"rule":"second"`, WantHeaders: map[string]string{"retry-after": "1"}},
			{Headers: [][2]string{hdr("x-request-id", "f")}, Want: 429, WantBody: `"rule":"hour"`, WantHeaders: map[string]string{"retry-after": "3600"}},
		},
	},
}
