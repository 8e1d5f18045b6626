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

func TestAt(t *testing.T) {
	data := []byte("ab\ncd\n")
	for _, c := range []struct {
		off  int64
		want string
	}{
		{0, "byte 0 (line 1, column 1)"},
		{4, "byte 4 (line 2, column 2)"},
		{6, "byte 6 (line 3, column 1)"},
		{7, "byte 7"},
		{-1, "byte -1"},
	} {
		if got := at(data, c.off); got != c.want {
			t.Errorf("at(%d) = %q, want %q", c.off, got, c.want)
		}
	}
}
