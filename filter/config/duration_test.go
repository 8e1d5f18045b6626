package config

import "testing"

// TestParseDurationValidAllocatesNothing checks that a valid duration builds no error
// message: quoting the text for a message that is thrown away would make V8 compile
// strconv's quoting during every valid configuration's proxy_on_configure (see
// filter/doc.go). (A term in days beside other terms, "1d12h", is copied once to be read as
// hours; "1d" alone takes the fast path.)
func TestParseDurationValidAllocatesNothing(t *testing.T) {
	for _, s := range []string{"1s", "1m30s", "250ms", "1d", "-5s", "1.5h"} {
		if n := testing.AllocsPerRun(100, func() {
			if _, msg := parseDuration(s); msg != "" {
				t.Fatalf("parseDuration(%q): %s", s, msg)
			}
		}); n != 0 {
			t.Errorf("parseDuration(%q) allocates %v times; a valid duration must build no message", s, n)
		}
	}
}
