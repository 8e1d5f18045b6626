package filtertest

import (
	"fmt"
	"strings"
	"testing"
)

// OverrideChangeAlgorithms are the algorithms the override changes run under.
var OverrideChangeAlgorithms = []string{
	`"algorithm":"token_bucket"`, `"algorithm":"gcra"`, `"algorithm":"fixed_window"`,
	`"algorithm":"sliding_window","variant":"log"`,
}

// OverrideChangeConfigs are five configurations of one rule, 10 an hour keyed on x-k with the
// given scope ("local" or "global") and algorithm fields, applied in turn to one store: the
// plain rule; an override prefix "free-" of 5; the same override re-spelt "free"; an exact
// override "free-alice" of 8; and the plain rule again. A key's state belongs to the rule and
// the key, so each change converts free-alice's state without grant: once it has used its
// 10, none of the later configurations admits it again (CheckOverrideChanges).
func OverrideChangeConfigs(scope, algo string) []string {
	overrides := []string{"", `{"prefix":"free-","limit":5}`, `{"prefix":"free","limit":5}`,
		`{"exact":"free-alice","limit":8}`, ""}
	var out []string
	for _, o := range overrides {
		if o != "" {
			o = `,"overrides":[` + o + `]`
		}
		rule := fmt.Sprintf(`{"name":"tiers","scope":%q,"key":[{"source":"header","name":"x-k"}],%s,"limit":10,"window":"1h"%s}`, scope, algo, o)
		out = append(out, `[`+rule+`]`)
	}
	return out
}

// CheckOverrideChanges sends free-alice's requests under each of the rules arrays (see
// OverrideChangeConfigs) in turn, each until one is denied; open starts the filter with one
// of them, on the store the others used, and returns a function that sends one request with
// x-k: free-alice and reports whether it was admitted. At most 10 may be admitted in all.
func CheckOverrideChanges(t *testing.T, configs []string, open func(t *testing.T, rules string) func() bool) {
	t.Helper()
	var admitted []int
	total := 0
	for i, rules := range configs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			do := open(t, rules)
			n := 0
			for ; n < 20 && do(); n++ {
			}
			admitted = append(admitted, n)
			total += n
		})
	}
	if len(admitted) != len(configs) || admitted[0] != 10 || total > 10 {
		t.Fatalf("free-alice admitted %v under the configurations in turn (%d in all), want 10 under the first and none after:\n%s",
			admitted, total, strings.Join(configs, "\n"))
	}
}
