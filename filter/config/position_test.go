package config

import (
	"strconv"
	"strings"
	"testing"
)

// A syntax error in a multi-line configuration names the line and the column (in characters)
// of the offending byte, as an editor shows them, and the path of the value it is in. The
// offending byte of a trailing comma is the comma.
func TestSyntaxErrorGivesLineAndColumn(t *testing.T) {
	doc := "{\n  \"rules\": [\n    {\"name\": \"é\", }\n  ]\n}"
	_, err := Parse([]byte(doc))
	if err == nil {
		t.Fatal("Parse accepted invalid JSON")
	}
	off := strings.Index(doc, ", }")
	want := "rules[0]: invalid JSON at byte " + strconv.Itoa(off) + " (line 3, column 17): invalid character ','"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

func TestWithLineColumn(t *testing.T) {
	data := []byte("ab\ncd\n")
	for _, c := range []struct{ msg, want string }{
		{"at byte 0: x", "at byte 0 (line 1, column 1): x"},
		{"at byte 4: x", "at byte 4 (line 2, column 2): x"},
		{"ends at byte 6", "ends at byte 6 (line 3, column 1)"},
		{"at byte 7: beyond the data", "at byte 7: beyond the data"},
		{"at byte 99999999999999999999999: huge", "at byte 99999999999999999999999: huge"},
		{"no offset here", "no offset here"},
		{"byte x", "byte x"},
	} {
		if got := withLineColumn(data, c.msg); got != c.want {
			t.Errorf("withLineColumn(%q) = %q, want %q", c.msg, got, c.want)
		}
	}
}
