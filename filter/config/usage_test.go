package config

import (
	"slices"
	"testing"
)

// usageInvalidCases are usage costs that Parse must refuse, run with invalidCases by
// TestParseInvalid and TestSchemaRejectsInvalid.
var usageInvalidCases = []invalidCase{
	{"usage without max", oneRule(tb + `,"cost":{"reserve":5,"usage":{"header":"x-usage"}}`),
		[]string{"rules[0].cost.max: required: it bounds what one request is charged, and the overshoot while streams are open"}, schemaRejects},
	{"usage without reserve", oneRule(tb + `,"cost":{"usage":{"header":"x-usage"},"max":10}`),
		[]string{"rules[0].cost.reserve: required: the units a request holds until its usage is known"}, schemaRejects},
	{"usage without usage", oneRule(tb + `,"cost":{"reserve":5,"max":10}`),
		[]string{`rules[0].cost.usage: required: {"header": name} or {"json": [pointers]}`}, schemaRejects},
	{"usage both sources", oneRule(tb + `,"cost":{"reserve":5,"max":10,"usage":{"header":"x-usage","json":["/a"]}}`),
		[]string{`rules[0].cost.usage: set one of "header" and "json", not both`}, schemaRejects},
	{"usage no source", oneRule(tb + `,"cost":{"reserve":5,"max":10,"usage":{}}`),
		[]string{`rules[0].cost.usage: needs "header" (a response header) or "json" (pointers into the response body)`}, schemaRejects},
	{"usage bad pointer", oneRule(tb + `,"cost":{"reserve":5,"max":10,"usage":{"json":["/usage/total_tokens","usage"]}}`),
		[]string{`rules[0].cost.usage.json[1]: "usage" is no JSON pointer to a value: it must start with "/" (for example "/usage/total_tokens")`}, schemaRejects},
	{"usage bad escape", oneRule(tb + `,"cost":{"reserve":5,"max":10,"usage":{"json":["/a~2b"]}}`),
		[]string{`rules[0].cost.usage.json[0]: "/a~2b" has a "~" that is not "~0" or "~1"`}, schemaAccepts},
	{"usage empty pointers", oneRule(tb + `,"cost":{"reserve":5,"max":10,"usage":{"json":[]}}`),
		[]string{`rules[0].cost.usage.json: must not be empty`}, schemaRejects},
	{"usage reserve above max", oneRule(tb + `,"cost":{"reserve":50,"max":10,"usage":{"header":"x-usage"}}`),
		[]string{"rules[0].cost.reserve: must be <= the cost's max (10), got 50"}, schemaAccepts},
	{"usage reserve header above max", oneRule(tb + `,"cost":{"reserve":{"header":"x-max-tokens","max":50},"max":10,"usage":{"header":"x-usage"}}`),
		[]string{"rules[0].cost.reserve.max: must be <= the cost's max (10), got 50"}, schemaAccepts},
	{"usage reserve above capacity", oneRule(tb + `,"cost":{"reserve":50,"max":100,"usage":{"header":"x-usage"}}`),
		[]string{"rules[0].cost.reserve: every request costs 50, more than the rule ever allows (limit 10)"}, schemaAccepts},
	{"usage reserve header max above capacity", oneRule(tb + `,"cost":{"reserve":{"header":"x-max-tokens","max":50},"max":100,"usage":{"header":"x-usage"}}`),
		[]string{"rules[0].cost.reserve.max: a request with the header at 50 (or an invalid value) would never be admitted: the rule allows at most 10 (limit); lower max to at most that"}, schemaAccepts},
	{"usage reserve above an override's capacity", oneRule(tb + `,"key":[{"source":"header","name":"k"}],"overrides":[{"exact":"a","limit":2}],"cost":{"reserve":5,"max":100,"usage":{"header":"x-usage"}}`),
		[]string{"rules[0].overrides[0].cost.reserve: every request costs 5, more than the rule ever allows (limit 2)"}, schemaAccepts},
	{"usage on_missing", oneRule(tb + `,"cost":{"reserve":5,"max":10,"usage":{"header":"x-usage"},"on_missing":"zero"}`),
		[]string{`rules[0].cost.on_missing: "zero" is not one of reserve, max`}, schemaRejects},
	{"usage unknown field", oneRule(tb + `,"cost":{"reserve":5,"max":10,"usage":{"header":"x-usage"},"min":1}`),
		[]string{`rules[0].cost.min: unknown field (did you mean "max"?)`}, schemaRejects},
	{"usage sliding log", oneRule(`"algorithm":"sliding_window","variant":"log","limit":10,"window":"1s","cost":{"reserve":5,"max":10,"usage":{"header":"x-usage"}}`),
		[]string{`rules[0].cost: a usage cost is not for this rule: variant: the sliding window "log" takes no usage cost: it records one timestamp per unit, and a unit known only after the response has no instant`}, schemaAccepts},
	{"usage shaper", oneRule(`"algorithm":"leaky_bucket","mode":"shape","max_delay":"1s","limit":10,"window":"1s","cost":{"reserve":5,"max":10,"usage":{"header":"x-usage"}}`),
		[]string{`rules[0].cost: a usage cost is not for this rule: max_delay: a shaping leaky bucket takes no usage cost: a request's delay is fixed before its usage is known`}, schemaAccepts},
	{"usage adaptive", oneRule(`"algorithm":"adaptive","window":"1s","adaptive":{"min_limit":1,"max_limit":10,"error_threshold":0.1},"cost":{"reserve":5,"max":10,"usage":{"header":"x-usage"}}`),
		[]string{`rules[0].cost: a usage cost is not for this rule: algorithm: adaptive takes no usage cost: its limit moves while reservations are open`}, schemaAccepts},
	{"usage with lease", oneRule(tb + `,"cost":{"reserve":5,"max":10,"usage":{"header":"x-usage"}},"lease":{"batch":10}`),
		[]string{`rules[0].lease: not with a usage cost: a request's units are settled on the rule's state when its stream ends`}, schemaAccepts},
	{"usage max inexact", oneRule(`"algorithm":"gcra","limit":1000,"window":"1h","cost":{"reserve":5,"max":1000000000,"usage":{"header":"x-usage"}}`),
		[]string{"rules[0].cost.max: (burst + max + 1)*window/limit = 3.6e+18 exceeds 2^53 = 9007199254740992, the largest integer the exact arithmetic (and its Lua port) can hold; lower the cost's max or the burst"}, schemaAccepts},
}

func init() { invalidCases = append(invalidCases, usageInvalidCases...) }

func TestParseUsage(t *testing.T) {
	c, err := Parse([]byte(`{"rules":[{"name":"llm","key":[{"source":"header","name":"x-api-key"}],
		"algorithm":"token_bucket","limit":100000,"window":"1m",
		"cost":{"reserve":{"header":"x-max-tokens","default":1000,"max":32000},
		        "usage":{"json":["/message/usage/input_tokens","/usage/output_tokens","/a~1b~0c"]},
		        "max":100000,"on_missing":"max"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cs := c.Rules[0].CostSpec
	u := cs.Usage
	if u == nil || cs.Header != "x-max-tokens" || cs.Default != 1000 || cs.Max != 32000 || u.Max != 100000 || u.OnMissing != UsageMissingMax || u.Header != "" {
		t.Fatalf("cost %+v, usage %+v", cs, u)
	}
	want := [][]string{{"message", "usage", "input_tokens"}, {"usage", "output_tokens"}, {"a/b~c"}}
	if !slices.EqualFunc(u.Pointers, want, slices.Equal) {
		t.Errorf("pointers %q, want %q", u.Pointers, want)
	}
	if got := u.MissingCharge(500); got != 100000 {
		t.Errorf("MissingCharge = %d", got)
	}
	if got := u.Charge(200000); got != 100000 {
		t.Errorf("Charge above max = %d", got)
	}

	c, err = Parse([]byte(`{"rules":[{"name":"r",` + tb + `,"cost":{"reserve":4,"usage":{"header":"X-Usage-Tokens"},"max":10}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if cs := c.Rules[0].CostSpec; cs.Constant != 4 || cs.Usage.Header != "x-usage-tokens" || cs.Usage.OnMissing != UsageMissingReserve || cs.Usage.MissingCharge(4) != 4 {
		t.Errorf("cost %+v, usage %+v", cs, cs.Usage)
	}
}

// TestParseUsageGlobal: a global rule of every algorithm with a usage cost takes one (the
// Redis script settles it).
func TestParseUsageGlobal(t *testing.T) {
	for _, alg := range []string{`"algorithm":"token_bucket","limit":1000,"window":"1m"`,
		`"algorithm":"gcra","limit":1000,"window":"1m","burst":500`,
		`"algorithm":"leaky_bucket","limit":1000,"window":"1m"`,
		`"algorithm":"fixed_window","limit":1000,"window":"1m"`,
		`"algorithm":"sliding_window","limit":1000,"window":"1m"`} {
		c, err := Parse([]byte(`{"redis":{"cluster":"webdis"},"rules":[{"name":"r",` + alg +
			`,"scope":"global","cost":{"reserve":50,"max":400,"usage":{"json":["/usage/total_tokens"]}}}]}`))
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if r := c.Rules[0]; r.Scope != ScopeGlobal || r.CostSpec.Usage == nil || r.CostSpec.Constant != 50 {
			t.Errorf("%s: rule %+v", alg, r)
		}
	}
}
