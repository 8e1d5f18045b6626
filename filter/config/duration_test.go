package config

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestParseDurationValidAllocatesNothing checks that a valid duration builds no error
// message: quoting the text for a message that is thrown away would make V8 compile
// strconv's quoting during every valid configuration's proxy_on_configure (see
// filter/doc.go).
func TestParseDurationValidAllocatesNothing(t *testing.T) {
	for _, s := range []string{"1s", "1m30s", "250ms", "1d", "1.5d", "1d12h", "-5s", "1.5h"} {
		if n := testing.AllocsPerRun(100, func() {
			if _, msg := parseDuration(s); msg != "" {
				t.Fatalf("parseDuration(%q): %s", s, msg)
			}
		}); n != 0 {
			t.Errorf("parseDuration(%q) allocates %v times; a valid duration must build no message", s, n)
		}
	}
}

// simpleDuration, the fast path of parseDuration, agrees with the full parser on every input
// it accepts, and accepts the common forms.
func TestSimpleDurationAgrees(t *testing.T) {
	check := func(s string) bool {
		d, ok := simpleDuration(s)
		if !ok {
			return false
		}
		want, msg := parseDurationFull(s)
		if msg != "" || d != want {
			t.Fatalf("simpleDuration(%q) = %v; parseDurationFull = %v, %q", s, d, want, msg)
		}
		return true
	}
	for _, s := range []string{"1s", "500ms", "1d", "10us", "7ns", "2h", "30m", "0s", "9223372036ns", "106751d", "999999999999999999ns", "1µs"} {
		if !check(s) {
			t.Errorf("simpleDuration(%q) declined a simple duration", s)
		}
	}
	for _, s := range []string{"", "s", "1", "1.5s", "+1s", "-1s", "1m30s", "1 s", "1S", "1sx", "0x1s",
		"9999999999999999999ns", "1000000000000000000ns", "106752d", "1e3s"} {
		if check(s) {
			t.Errorf("simpleDuration(%q) accepted a form it leaves to parseDurationFull", s)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = "0123456789.+-smhdnuµ "
	accepted := 0
	for range 300_000 {
		b := make([]byte, 1+rng.IntN(22))
		for i := range b {
			if rng.IntN(3) > 0 && i < len(b)-2 {
				b[i] = '0' + byte(rng.IntN(10))
			} else {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		if check(string(b)) {
			accepted++
		}
	}
	if accepted < 100 {
		t.Fatalf("only %d random inputs took the fast path", accepted)
	}
}

// The config's parser and time.ParseDuration agree on every duration written in Go's own
// syntax with up to nine fraction digits (where Go's float arithmetic is exact too).
func TestParseDurationAgreesWithGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	units := []string{"ns", "us", "µs", "ms", "s", "m", "h"}
	for range 100_000 {
		var b strings.Builder
		if rng.IntN(4) == 0 {
			b.WriteByte("+-"[rng.IntN(2)])
		}
		for range 1 + rng.IntN(3) {
			b.WriteString(strconv.Itoa(rng.IntN(100_000)))
			if rng.IntN(2) == 0 {
				b.WriteString("." + strconv.Itoa(1_000_000_000 + rng.IntN(1_000_000_000))[1:2+rng.IntN(9)])
			}
			b.WriteString(units[rng.IntN(len(units))])
		}
		s := b.String()
		want, err := time.ParseDuration(s)
		got, msg := parseDuration(s)
		if (err == nil) != (msg == "") || got != want {
			t.Fatalf("parseDuration(%q) = %v, %q; time.ParseDuration: %v, %v", s, got, msg, want, err)
		}
	}
}
