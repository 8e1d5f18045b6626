package envoycheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lineColumnOf returns the 1-based line and column of the first occurrence of needle in text
// at or after line from.
func lineColumnOf(t *testing.T, text, needle string, from int) (int, int) {
	t.Helper()
	for i, line := range strings.Split(text, "\n") {
		if i+1 < from {
			continue
		}
		if c := strings.Index(line, needle); c >= 0 {
			return i + 1, c + 1
		}
	}
	t.Fatalf("%q is not in the text", needle)
	return 0, 0
}

// An error inside a bootstrap's filter configuration (a string embedded in the YAML) is
// reported at the line and column of the file, where an editor finds it, not at a byte or a
// line of the embedded string: a syntax error at the offending character, a field's error at
// the field's key (a missing field at its object).
func TestPluginConfigErrorsAtFileLineColumn(t *testing.T) {
	syntax := bootstrap(`{"rules":[{"name":"api",
"algorithm":"token_bucket",
"limit":5
"window":"1s"}]}`, normalised)
	rep := Bytes([]byte(syntax))
	line, col := lineColumnOf(t, syntax, `"window":"1s"`, 1)
	want := fmt.Sprintf(`invalid JSON at line %d, column %d (byte `, line, col)
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], want) {
		t.Fatalf("errors %q, want one containing %q", rep.Errors, want)
	}

	fields := bootstrap(`{"rules":[
  {"name":"a","algorithm":"token_bucket","limit":5,"window":"1s","continue":true},
  {"name":"b","algorithm":"token_bucket","limt":5,"window":"1s"}]}`, normalised)
	rep = Bytes([]byte(fields))
	line, col = lineColumnOf(t, fields, `"limt"`, 1)
	objLine, objCol := lineColumnOf(t, fields, `{"name":"b"`, 1)
	for _, want := range []string{
		fmt.Sprintf(`line %d, column %d: rules[1].limt: unknown field`, line, col),
		fmt.Sprintf(`line %d, column %d: rules[1].limit: required`, objLine, objCol),
	} {
		if !strings.Contains(strings.Join(rep.Errors, "\n"), want) {
			t.Errorf("errors %q, want one containing %q", rep.Errors, want)
		}
	}

	// A value on one line, quoted: its bytes are the file's from the opening quote on.
	quoted := strings.Replace(bootstrap(`{}`, normalised), "value: |\n                    {}",
		`value: '{"rules":[{"name":"q","algorithm":"token_bucket","limit":5,"window":"1x"}]}'`, 1)
	rep = Bytes([]byte(quoted))
	line, col = lineColumnOf(t, quoted, `"window":"1x"`, 1)
	want = fmt.Sprintf(`line %d, column %d: rules[0].window:`, line, col)
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], want) {
		t.Fatalf("quoted: errors %q, want one containing %q", rep.Errors, want)
	}

	// A folded block's lines are joined, so the file has no exact position: the error says
	// where in the value, and where the value starts.
	folded := strings.Replace(syntax, "value: |", "value: >", 1)
	rep = Bytes([]byte(folded))
	vline, vcol := lineColumnOf(t, folded, "value: >", 1)
	want = fmt.Sprintf(`of the value at line %d, column %d`, vline, vcol+len("value: "))
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], want) {
		t.Fatalf("folded: errors %q, want one containing %q", rep.Errors, want)
	}
}

// A plugin configuration alone (the JSON that -config serves) is checked as the filter
// parses it, with the rules' checks that need no bootstrap, its errors at the file's line and
// column; the report says it was one.
func TestPluginConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rep := File(repoFile("filter/config/testdata/examples/global-redis.json"))
	if !rep.OK() || !rep.Plugin {
		t.Fatalf("a shipped example: %+v", rep)
	}
	rep = File(write("warn.json", `{"rules":[{"name":"ip","key":[{"source":"client_ip"}],"algorithm":"token_bucket","limit":5,"window":"1s"}]}`))
	if !rep.OK() || !rep.Plugin || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], `rules[0] ("ip"): key[0]: client_ip without ipv6_prefix`) {
		t.Fatalf("a rule's warning: %+v", rep)
	}
	bad := "{\"rules\":[\n  {\"name\":\"a\",\"algorithm\":\"token_bucket\",\n   \"limt\":5,\"window\":\"1s\"}]}\n"
	rep = File(write("bad.json", bad))
	if rep.OK() || !strings.Contains(strings.Join(rep.Errors, "\n"), `line 3, column 4: rules[0].limt: unknown field`) {
		t.Fatalf("an unknown field: %+v", rep)
	}
	rep = File(write("syntax.json", "{\"rules\":[\n  {\"name\":\"a\"\n   \"limit\":5}]}"))
	if rep.OK() || len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], `invalid JSON at line 3, column 4`) {
		t.Fatalf("a syntax error: %+v", rep)
	}
	// A bootstrap in JSON is still a bootstrap.
	if IsPluginConfig([]byte(`{"static_resources":{}}`), "envoy.json") {
		t.Error("a JSON bootstrap taken for a plugin configuration")
	}
}
