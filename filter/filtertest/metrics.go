package filtertest

import (
	"strings"
	"testing"
)

// MetricScenario is a Scenario with the counters it must leave behind: what an operator reads
// in ratelimit_requests_total after those requests.
type MetricScenario struct {
	Scenario
	// Counters are full stat names (as the filter defines them, before Envoy's tag
	// extraction) and the value each must have after the steps.
	Counters map[string]int64
}

// MetricScenarios are the counting rules of the README's Metrics section for requests that
// several rules decide. Each one runs natively and against the compiled module.
var MetricScenarios = []MetricScenario{
	{
		// A request that a later rule denies was let through by no rule: the earlier rule,
		// which admitted it and is charged nothing for it, must not count it as allowed, or
		// its allowed count would run ahead of what it charged. Each denial is counted once,
		// by the rule that denied.
		Scenario: Scenario{
			Name: "a request a later rule denies is counted by that rule alone",
			Config: `{"rules":[
				{"name":"wide","continue":true,"algorithm":"fixed_window","limit":10,"window":"1h"},
				{"name":"narrow","algorithm":"fixed_window","limit":1,"window":"1h"}]}`,
			Steps: []Step{
				{WantHeaders: map[string]string{"ratelimit": `"wide";r=9;t=3600, "narrow";r=0;t=3600`}},
				{Want: 429, WantBody: `"rule":"narrow"`},
				{Want: 429, WantBody: `"rule":"narrow"`},
			},
		},
		Counters: map[string]int64{
			"ratelimit_requests_total;rule=wide;decision=allowed":   1,
			"ratelimit_requests_total;rule=wide;decision=denied":    0,
			"ratelimit_requests_total;rule=narrow;decision=allowed": 1,
			"ratelimit_requests_total;rule=narrow;decision=denied":  2,
		},
	},
	{
		// The same for a shadow rule: the third request, which "dry" would have denied, is
		// denied by "real" and counted there alone, so "dry" counts one shadow denial, not
		// two. Its shadow_denied says how many requests enforcing it would newly deny.
		Scenario: Scenario{
			Name: "shadow and enforced rules: shadow denials, allowed and denied",
			Config: `{"rules":[
				{"name":"dry","continue":true,"shadow":true,"algorithm":"fixed_window","limit":1,"window":"1h"},
				{"name":"real","algorithm":"fixed_window","limit":2,"window":"1h"}]}`,
			Steps: []Step{{}, {}, {Want: 429, WantBody: `"rule":"real"`}},
		},
		Counters: map[string]int64{
			"ratelimit_requests_total;rule=dry;decision=allowed":       1,
			"ratelimit_requests_total;rule=dry;decision=shadow_denied": 1,
			"ratelimit_requests_total;rule=dry;decision=denied":        0,
			"ratelimit_requests_total;rule=real;decision=allowed":      2,
			"ratelimit_requests_total;rule=real;decision=denied":       1,
		},
	},
	{
		// A repeated key header is refused by the first enforced rule that keys on it, and
		// counted there; a shadow rule before it counts it too (in duplicate_header only,
		// never in skipped), and a later rule, which never saw the request decided, nothing.
		Scenario: Scenario{
			Name: "a repeated key header is counted by the shadow rules before it and the rule that refuses it",
			Config: `{"rules":[
				{"name":"dry","continue":true,"shadow":true,"key":[{"source":"header","name":"x-api-key"}],"algorithm":"fixed_window","limit":5,"window":"1h"},
				{"name":"first","continue":true,"key":[{"source":"header","name":"x-api-key"}],"algorithm":"fixed_window","limit":5,"window":"1h"},
				{"name":"second","key":[{"source":"header","name":"x-api-key"}],"algorithm":"fixed_window","limit":5,"window":"1h"}]}`,
			Steps: []Step{
				{Headers: [][2]string{hdr("x-api-key", "a"), hdr("x-api-key", "b")}, Want: 400,
					WantBody: `{"error":"duplicate_header","rule":"first"`},
				{Headers: [][2]string{hdr("x-api-key", "a")}},
			},
		},
		Counters: map[string]int64{
			"ratelimit_requests_total;rule=dry;decision=duplicate_header":    1,
			"ratelimit_requests_total;rule=dry;decision=skipped":             0,
			"ratelimit_requests_total;rule=dry;decision=allowed":             1,
			"ratelimit_requests_total;rule=first;decision=duplicate_header":  1,
			"ratelimit_requests_total;rule=first;decision=denied":            0,
			"ratelimit_requests_total;rule=first;decision=allowed":           1,
			"ratelimit_requests_total;rule=second;decision=duplicate_header": 0,
			"ratelimit_requests_total;rule=second;decision=allowed":          1,
		},
	},
	{
		// enforce_percent 50 enforces the rule's denials on the requests whose x-request-id
		// hashes below half of [0, 10^6) (FNV-1a 64 modulo 10^6: "e" 129152, "f" 13785, "h"
		// 295895; "a" 641996, "b" 526629, "c" 898418), and lets the others through as a shadow
		// rule would: counted as shadow_denied, charged nothing, the upstream told. (Every
		// request has an id here: the wazero host, like Envoy, gives one to a request without.)
		Scenario: Scenario{
			Name: "enforce_percent: denials enforced on the requests x-request-id selects, shadow denials on the others",
			Config: `{"rules":[{"name":"rollout","enforce_percent":50,"shadow_request_header":"x-unenforced",
				"algorithm":"fixed_window","limit":1,"window":"1h"}]}`,
			Steps: []Step{
				{Headers: [][2]string{hdr("x-request-id", "e")}, WantHeaders: map[string]string{"ratelimit": `"rollout";r=0;t=3600`},
					WantUpstreamHeaders: map[string]string{"x-unenforced": "-"}},
				{Headers: [][2]string{hdr("x-request-id", "a")}, WantHeaders: map[string]string{"ratelimit": `"rollout";r=0;t=3600`},
					WantUpstreamHeaders: map[string]string{"x-unenforced": "rollout"}},
				{Headers: [][2]string{hdr("x-request-id", "f")}, Want: 429, WantBody: `"rule":"rollout"`},
				{Headers: [][2]string{hdr("x-request-id", "b")}, WantUpstreamHeaders: map[string]string{"x-unenforced": "rollout"}},
				{Headers: [][2]string{hdr("x-request-id", "c")}, WantUpstreamHeaders: map[string]string{"x-unenforced": "rollout"}},
				{Headers: [][2]string{hdr("x-request-id", "h")}, Want: 429},
				{Headers: [][2]string{hdr("x-request-id", "a"), hdr("x-unenforced", "forged")}, WantUpstreamHeaders: map[string]string{"x-unenforced": "rollout"}},
			},
		},
		Counters: map[string]int64{
			"ratelimit_requests_total;rule=rollout;decision=allowed":       1,
			"ratelimit_requests_total;rule=rollout;decision=denied":        2,
			"ratelimit_requests_total;rule=rollout;decision=shadow_denied": 4,
		},
	},
	{
		// Every rule of a request reads the request's one sample: "c" (898418) is enforced by
		// neither rule, "h" (295895) by "half" alone, "f" (13785) by both. A top-level
		// enforce_percent is the default of the rules without their own; a shadow rule
		// ignores it. A request an enforced denial stops is counted by that rule alone, as
		// ever: the unenforced denial of "quarter" before it is not counted.
		Scenario: Scenario{
			Name: "enforce_percent: one sample per request for every rule, the top level as default",
			Config: `{"enforce_percent":25,"rules":[
				{"name":"quarter","continue":true,"algorithm":"fixed_window","limit":1,"window":"1h"},
				{"name":"half","continue":true,"enforce_percent":50,"algorithm":"fixed_window","limit":1,"window":"1h"},
				{"name":"dry","shadow":true,"algorithm":"fixed_window","limit":1,"window":"1h"}]}`,
			Steps: []Step{
				{Headers: [][2]string{hdr("x-request-id", "g")}},
				{Headers: [][2]string{hdr("x-request-id", "c")}},
				{Headers: [][2]string{hdr("x-request-id", "h")}, Want: 429, WantBody: `"rule":"half"`},
				{Headers: [][2]string{hdr("x-request-id", "f")}, Want: 429, WantBody: `"rule":"quarter"`},
			},
		},
		Counters: map[string]int64{
			"ratelimit_requests_total;rule=quarter;decision=allowed":       1,
			"ratelimit_requests_total;rule=quarter;decision=shadow_denied": 1,
			"ratelimit_requests_total;rule=quarter;decision=denied":        1,
			"ratelimit_requests_total;rule=half;decision=allowed":          1,
			"ratelimit_requests_total;rule=half;decision=shadow_denied":    1,
			"ratelimit_requests_total;rule=half;decision=denied":           1,
			"ratelimit_requests_total;rule=dry;decision=allowed":           1,
			"ratelimit_requests_total;rule=dry;decision=shadow_denied":     1,
		},
	},
	{
		// near_limit counts the admissions that leave more than near_limit_ratio of the
		// capacity used: with the default 0.8 and a limit of 10, the 9th and 10th requests
		// (used 9 and 10 > 8); with 0.5 and a burst of 8, the 5th to 8th (used 5 to 8 > 4). A
		// denial is not near the limit, it is over it.
		Scenario: Scenario{
			Name: "near_limit: admissions above near_limit_ratio of the capacity",
			Config: `{"rules":[
				{"name":"window","continue":true,"algorithm":"fixed_window","limit":10,"window":"1h"},
				{"name":"bucket","near_limit_ratio":0.5,"algorithm":"token_bucket","limit":4,"window":"1h","burst":8}]}`,
			Steps: []Step{{}, {}, {}, {}, {}, {}, {}, {},
				{Want: 429, WantBody: `"rule":"bucket"`}},
		},
		Counters: map[string]int64{
			"ratelimit_near_limit_total;rule=window": 0,
			"ratelimit_near_limit_total;rule=bucket": 4,
		},
	},
	{
		Scenario: Scenario{
			Name:   "near_limit: the default ratio 0.8 of a limit of 10",
			Config: `{"rules":[{"name":"window","algorithm":"fixed_window","limit":10,"window":"1h"}]}`,
			Steps:  []Step{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {Want: 429}},
		},
		Counters: map[string]int64{
			"ratelimit_near_limit_total;rule=window":                2,
			"ratelimit_requests_total;rule=window;decision=allowed": 10,
		},
	},
	{
		// A rule whose conditions hold but whose key part (without a default) the request
		// lacks skips it, and counts it as skipped; evaluation goes on to the next rule. A
		// rule whose conditions do not hold counts nothing.
		Scenario: Scenario{
			Name: "a rule without its key part counts the request as skipped",
			Config: `{"rules":[
				{"name":"posts","continue":true,"match":{"methods":["POST"]},"key":[{"source":"header","name":"x-tenant"}],"algorithm":"fixed_window","limit":5,"window":"1h"},
				{"name":"per-tenant","continue":true,"key":[{"source":"header","name":"x-tenant"}],"algorithm":"fixed_window","limit":5,"window":"1h"},
				{"name":"dry","continue":true,"shadow":true,"key":[{"source":"header","name":"x-tenant"}],"algorithm":"fixed_window","limit":5,"window":"1h"},
				{"name":"per-ip","key":[{"source":"client_ip"}],"algorithm":"fixed_window","limit":5,"window":"1h"}]}`,
			Steps: []Step{
				{WantHeaders: map[string]string{"ratelimit": `"per-ip";r=4;t=3600`}},
				{},
				{Headers: [][2]string{hdr("x-tenant", "a")}},
			},
		},
		Counters: map[string]int64{
			"ratelimit_requests_total;rule=posts;decision=skipped":      0,
			"ratelimit_requests_total;rule=per-tenant;decision=skipped": 2,
			"ratelimit_requests_total;rule=per-tenant;decision=allowed": 1,
			"ratelimit_requests_total;rule=dry;decision=skipped":        2,
			"ratelimit_requests_total;rule=dry;decision=allowed":        1,
			"ratelimit_requests_total;rule=per-ip;decision=skipped":     0,
			"ratelimit_requests_total;rule=per-ip;decision=allowed":     3,
		},
	},
	{
		// A key longer than max_key_bytes (64 here: "62:" and 62 bytes are 65) is refused
		// with 431 by the first enforced rule whose key it is, and counted there; a shadow
		// rule before it counts it and skips it, and a rule decided before it is charged
		// nothing ("first" has 4 of 5 left after the request that follows). A key of
		// exactly 64 bytes is decided.
		Scenario: Scenario{
			Name: "a key longer than max_key_bytes is refused and charges no rule",
			Config: `{"max_key_bytes":64,"rules":[
				{"name":"dry","continue":true,"shadow":true,"key":[{"source":"header","name":"x-key"}],"algorithm":"fixed_window","limit":5,"window":"1h"},
				{"name":"first","continue":true,"key":[{"source":"client_ip"}],"algorithm":"fixed_window","limit":5,"window":"1h"},
				{"name":"per-key","key":[{"source":"header","name":"x-key"}],"algorithm":"fixed_window","limit":5,"window":"1h"}]}`,
			Steps: []Step{
				{Headers: [][2]string{hdr("x-key", strings.Repeat("k", 62))}, Want: 431,
					WantBody: `{"error":"key_too_long","rule":"per-key","max_key_bytes":64,"message":"the request's key for this rule is 65 bytes, more than 64`},
				{Headers: [][2]string{hdr("x-key", strings.Repeat("k", 61))},
					WantHeaders: map[string]string{"ratelimit": `"first";r=4;t=3600, "per-key";r=4;t=3600`}},
			},
		},
		Counters: map[string]int64{
			"ratelimit_requests_total;rule=dry;decision=key_too_long":     1,
			"ratelimit_requests_total;rule=dry;decision=skipped":          0,
			"ratelimit_requests_total;rule=dry;decision=allowed":          1,
			"ratelimit_requests_total;rule=first;decision=key_too_long":   0,
			"ratelimit_requests_total;rule=first;decision=allowed":        1,
			"ratelimit_requests_total;rule=per-key;decision=key_too_long": 1,
			"ratelimit_requests_total;rule=per-key;decision=denied":       0,
			"ratelimit_requests_total;rule=per-key;decision=allowed":      1,
		},
	},
}

// Check runs the scenario on d and then compares every counter, read by read.
func (ms MetricScenario) Check(t *testing.T, d Driver, read func(name string) int64) {
	t.Helper()
	Run(t, d, ms.Scenario)
	for name, want := range ms.Counters {
		if have := read(name); have != want {
			t.Errorf("%s = %d, want %d", name, have, want)
		}
	}
}
