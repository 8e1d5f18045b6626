package filter

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/stretchr/testify/require"
)

// A repeated key header is refused before any rule is decided: with several matched rules, an
// earlier rule that would deny the request neither wins over the 400 nor is charged or counted
// for it, and a refused request from a new client charges the earlier rule nothing.
func TestDuplicateKeyHeaderBeforeAnyRuleIsDecidedNative(t *testing.T) {
	d := newNative(t, `{"rules":[
		{"name":"ip","continue":true,"key":[{"source":"client_ip"}],"algorithm":"fixed_window","limit":1,"window":"1h"},
		{"name":"per-key","key":[{"source":"header","name":"x-api-key"}],"algorithm":"fixed_window","limit":1,"window":"1h"}]}`)
	dup := func(src string) step {
		return step{Source: src, Headers: [][2]string{hdr("x-api-key", "a"), hdr("x-api-key", "b")}, Want: 400,
			WantBody: `{"error":"duplicate_header","rule":"per-key"`}
	}
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{
		{Source: "192.0.2.1:1", Headers: [][2]string{hdr("x-api-key", "a")}},
		dup("192.0.2.1:1"), // "ip" would deny it: the refusal comes first
		dup("192.0.2.2:1"), // a new client: nothing is charged
		{Source: "192.0.2.2:1", Headers: [][2]string{hdr("x-api-key", "c")}},
		{Source: "192.0.2.2:1", Headers: [][2]string{hdr("x-api-key", "d")}, Want: 429},
	}})
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=ip;decision=allowed"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=ip;decision=denied"))
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=duplicate_header"))
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=allowed"))
}

// With one matched rule, the repetition is found when the key is built, but still before the
// rule is decided: a refused request charges the rule nothing, and a repetition of a key
// that the rule would deny is refused with 400, not denied with 429.
func TestDuplicateKeyHeaderSingleRuleChargesNothingNative(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"per-key","key":[{"source":"header","name":"x-api-key"}],"algorithm":"fixed_window","limit":1,"window":"1h"}]}`)
	dup := step{Headers: [][2]string{hdr("x-api-key", "a"), hdr("x-api-key", "a")}, Want: 400,
		WantBody: `{"error":"duplicate_header","rule":"per-key"`}
	one := step{Headers: [][2]string{hdr("x-api-key", "a")}}
	denied := one
	denied.Want = 429
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{dup, one, denied, dup}})
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=duplicate_header"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=allowed"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=denied"))
}

// A shadow rule's repeated key header is counted (once, in duplicate_header) before the rules
// are decided, whether or not an earlier enforced rule then denies the request.
func TestShadowDuplicateCountedWhenAnEarlierRuleDeniesNative(t *testing.T) {
	d := newNative(t, `{"rules":[
		{"name":"ip","continue":true,"key":[{"source":"client_ip"}],"algorithm":"fixed_window","limit":1,"window":"1h"},
		{"name":"dry","shadow":true,"key":[{"source":"header","name":"x-user"}],"algorithm":"fixed_window","limit":5,"window":"1h"}]}`)
	shadowDup := step{Headers: [][2]string{hdr("x-user", "u1"), hdr("x-user", "u2")}}
	denied := shadowDup
	denied.Want = 429
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{shadowDup, denied}})
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=dry;decision=duplicate_header"))
	require.Zero(t, counterNative(d, "ratelimit_requests_total;rule=dry;decision=skipped"))
	require.Zero(t, counterNative(d, "ratelimit_requests_total;rule=dry;decision=allowed"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=ip;decision=allowed"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=ip;decision=denied"))
}

// Each refusal of a repeated key header is counted on the rule; a shadow
// rule counts it once, in duplicate_header, and skips the request instead of refusing it.
func TestDuplicateKeyHeaderMetricNative(t *testing.T) {
	d := newNative(t, `{"rules":[
		{"name":"dry","shadow":true,"continue":true,"key":[{"source":"header","name":"x-user"}],"algorithm":"fixed_window","limit":5,"window":"1m"},
		{"name":"per-key","key":[{"source":"header","name":"x-api-key"}],"algorithm":"fixed_window","limit":5,"window":"1m"}]}`)
	dup := step{Headers: [][2]string{hdr("x-api-key", "a"), hdr("x-api-key", "b"), hdr("x-user", "u")}, Want: 400}
	shadowDup := step{Headers: [][2]string{hdr("x-api-key", "a"), hdr("x-user", "u1"), hdr("x-user", "u2")}}
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{dup, dup, shadowDup}})
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=duplicate_header"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=dry;decision=duplicate_header"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=allowed"), "the shadow rule's repetition let the request through")
	// Counted once: a request is one decision of the rule, so the rule's decisions add up to
	// the requests it saw (not in skipped as well).
	require.Zero(t, counterNative(d, "ratelimit_requests_total;rule=dry;decision=skipped"))
}

// With a single matched rule the repetition is found when its key is built (decideFrom), not
// by a check of every matched rule first: an enforced rule still refuses the request with 400
// and a shadow rule still counts it once, in duplicate_header only, and lets it through.
func TestDuplicateKeyHeaderSingleRuleNative(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"per-key","key":[{"source":"header","name":"x-api-key"},{"source":"client_ip"}],"algorithm":"fixed_window","limit":5,"window":"1m"}]}`)
	dup := step{Headers: [][2]string{hdr("x-api-key", "a"), hdr("x-api-key", "b")}, Want: 400,
		WantBody: `{"error":"duplicate_header","rule":"per-key"`}
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{dup, {Headers: [][2]string{hdr("x-api-key", "a")}}, dup}})
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=duplicate_header"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=allowed"))
	require.Zero(t, counterNative(d, "ratelimit_requests_total;rule=per-key;decision=skipped"))
}

// The shadow half of TestDuplicateKeyHeaderSingleRuleNative (one emulator per test).
func TestDuplicateKeyHeaderSingleShadowRuleNative(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"dry","shadow":true,"key":[{"source":"header","name":"x-user","default":"-"}],"algorithm":"fixed_window","limit":5,"window":"1m"}]}`)
	shadowDup := step{Headers: [][2]string{hdr("x-user", "u1"), hdr("x-user", "u2")}}
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{shadowDup, shadowDup}})
	require.EqualValues(t, 2, counterNative(d, "ratelimit_requests_total;rule=dry;decision=duplicate_header"))
	require.Zero(t, counterNative(d, "ratelimit_requests_total;rule=dry;decision=skipped"))
	require.Zero(t, counterNative(d, "ratelimit_requests_total;rule=dry;decision=allowed"))
}

// A repeated key query parameter is counted in the same duplicate_header decision as a
// repeated key header, once per refused request.
func TestDuplicateKeyQueryMetricNative(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"q","key":[{"source":"query","name":"key"}],"algorithm":"fixed_window","limit":5,"window":"1m"}]}`)
	filtertest.Run(t, d, filtertest.Scenario{Steps: []step{{Path: "/x?key=a&key=b", Want: 400}, {Path: "/x?key=a"}}})
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=q;decision=duplicate_header"))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_requests_total;rule=q;decision=allowed"))
}
