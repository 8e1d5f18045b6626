package config

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestKeyPartUses checks keyPartUses against what keyPart reports: a key part with one of
// its source's fields has no "not used by source" problem, and one with any other field of
// keyPartFields has one. keyPart skips the not-used checks when every field is in its
// source's list, so a field missing from a list would be read or ignored silently.
func TestKeyPartUses(t *testing.T) {
	values := map[string]string{
		"name": `"x-a"`, "value": `"v"`, "default": `"-"`, "ipv4_prefix": `24`,
		"ipv6_prefix": `64`, "on_duplicate": `"first"`,
	}
	for _, s := range keySources {
		uses := keyPartUses(kindOf(Source(s)))
		for _, field := range keyPartFields[1:] {
			part := `{"source":"` + s + `","` + field + `":` + values[field]
			// The fields a source requires, so that the part is otherwise valid.
			switch {
			case field != "name" && (s == "header" || s == "query"):
				part += `,"name":"x-b"`
			case field != "value" && s == "const":
				part += `,"value":"c"`
			}
			part += `}`
			cfg := `{"rules":[{"name":"r","algorithm":"token_bucket","limit":1,"window":"1s","key":[` + part + `]}]}`
			_, err := Parse([]byte(cfg))
			notUsed := err != nil && strings.Contains(err.Error(), "not used by source")
			if want := !slices.Contains(uses, field); notUsed != want {
				t.Errorf("%s: reported as not used: %v, want %v (err: %v)", part, notUsed, want, err)
			}
		}
	}
}

// TestOptionalFieldLists checks that every field of a rule is either one that rule and
// algorithm always read (name, key, continue, algorithm, limit, window) or listed in
// ruleOptionFields or algorithmOptionFields: rule and algorithm call the readers of the
// others only when the rule sets one of the listed fields, so a field in neither list would
// be accepted and silently ignored in a rule that sets no other option.
func TestOptionalFieldLists(t *testing.T) {
	always := []string{"name", "key", "continue", "algorithm", "limit", "window"}
	for _, f := range ruleFields {
		in := 0
		for _, list := range [][]string{always, ruleOptionFields, algorithmOptionFields} {
			if slices.Contains(list, f) {
				in++
			}
		}
		if in != 1 {
			t.Errorf("rule field %q is in %d of the lists, want 1", f, in)
		}
	}
	for _, list := range [][]string{ruleOptionFields, algorithmOptionFields} {
		for _, f := range list {
			if !slices.Contains(ruleFields, f) {
				t.Errorf("option field %q is not a rule field", f)
			}
		}
	}
}

// TestOptionReadersRun checks, for each optional field, that a rule setting only that field
// (beyond the ones every rule has) has it read: a bad value is reported at its path.
func TestOptionReadersRun(t *testing.T) {
	bad := `{"bad":1}`
	for _, f := range append(slices.Clone(ruleOptionFields), algorithmOptionFields...) {
		cfg := `{"rules":[{"name":"r","algorithm":"token_bucket","limit":1,"window":"1s","` + f + `":` + bad + `}]}`
		_, err := Parse([]byte(cfg))
		if err == nil || !strings.Contains(err.Error(), "rules[0]."+f) {
			t.Errorf("%s set to %s: err %v, want a problem at rules[0].%s", f, bad, err, f)
		}
	}
}

// TestSmallIntegerAgrees checks that smallInteger, integer's fast path, reads every string
// it accepts as strconv.ParseInt does, and accepts the plain digit strings that fit it.
func TestSmallIntegerAgrees(t *testing.T) {
	for _, s := range []string{
		"0", "1", "7", "10", "007", "1000000000", "123456789012345678", "999999999999999999",
		"1234567890123456789", "9223372036854775807", "9223372036854775808", "-1", "+1", "",
		"1.5", "1e3", "12a", " 1", "٣",
	} {
		v, ok := smallInteger(s)
		want, err := strconv.ParseInt(s, 10, 64)
		if ok && (err != nil || v != want) {
			t.Errorf("smallInteger(%q) = %d, ParseInt: %d, %v", s, v, want, err)
		}
		plain := len(s) >= 1 && len(s) <= 18 && strings.Trim(s, "0123456789") == ""
		if ok != plain {
			t.Errorf("smallInteger(%q) ok = %v, want %v", s, ok, plain)
		}
	}
}
