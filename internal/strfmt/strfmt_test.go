package strfmt

import (
	"errors"
	"fmt"
	"io"
	"math"
	"testing"
	"time"
)

type name string

func (n name) String() string { return "name:" + string(n) }

type custom struct{}

// wrapVerb is a variable so that vet lets the tests misuse %w as callers might.
var wrapVerb = "%w"

// TestAsFmt: every supported verb and type formats as fmt formats it, including the verbs
// and arguments of the filter's messages (%q of a rule name, %d of lengths, %v of errors and
// durations, %.1f of sizes, %.4g of an estimate).
func TestAsFmt(t *testing.T) {
	err := errors.New("boom")
	cases := []struct {
		format string
		args   []any
	}{
		{"plain", nil},
		{"100%% sure", nil},
		{"%d %d %d %d %d", []any{0, -1, int64(math.MinInt64), uint64(math.MaxUint64), uint32(7)}},
		{"%d %d %d %d", []any{int8(-8), int16(16), int32(-32), uint8(8)}},
		{"%5d|%-5d|%05d|%+d|% d|%.3d", []any{42, 42, -42, 42, 42, 7}},
		{"%x %X %#x %#X", []any{255, 255, 255, uint64(1) << 40}},
		{"%s %v %q", []any{"a b", "c", "d\"e\x00\xff"}},
		{"%.3s %.2q %10s|%-10s|", []any{"héllo", "héllo", "x", "y"}},
		{"%+q %#q %#q", []any{"é", "back", "no`"}},
		{"%x %X", []any{"hi", []byte{0xab, 0x01}}},
		{"%s %v", []any{[]byte("bytes"), []string{"a", "b"}}},
		{"%q", []any{[]string{"a", "b c"}}},
		{"%v %t", []any{true, false}},
		{"%v %s %q %d", []any{90 * time.Second, time.Millisecond, time.Minute, time.Second}},
		{"%v %s %q", []any{err, err, err}},
		{"%v %s", []any{name("n"), name("m")}},
		{"%v %.1f %.0f %f %.4g %g %e %.3e", []any{0.05, 1.25, 2.5, 3.0, 12345678.9, 1e21, 1e-7, 123456.0}},
		{"%v %v %v %v %v", []any{1e20, 1e21, 1e-5, float32(0.1), 100.0}},
		{"%v %v %v %.1f %+.1f", []any{math.Inf(1), math.Inf(-1), math.NaN(), math.Inf(1), 2.0}},
		{"%8.2f|%-8.2f|%08.2f", []any{3.14159, 3.14159, -3.14159}},
		{"%c %q", []any{'x', 'y'}},
		{"%v %d", []any{nil, nil}},
		{"%d %d", []any{1}},
		{"%d", []any{1, "extra"}},
		{"%d", []any{"str"}},
		{"%t", []any{1}},
		{"ratelimit: rule %q: state update failed (%d so far), applying failure_mode %q: %v",
			[]any{"r1", 3, "allow", io.ErrUnexpectedEOF}},
		{"rules[%d].name: %q and %q differ only in '.', '-' and '_'", []any{2, "a.b", "a_b"}},
		{"%s = %.4g exceeds 2^53 = %d", []any{"limit*window", 1.2345e17, int64(1) << 53}},
	}
	for _, c := range cases {
		want := fmt.Sprintf(c.format, c.args...)
		if got := Sprintf(c.format, c.args...); got != want {
			t.Errorf("Sprintf(%q):\n got  %q\n want %q", c.format, got, want)
		}
		if got := string(Append([]byte("x"), c.format, c.args...)); got != "x"+want {
			t.Errorf("Append(%q): got %q", c.format, got)
		}
	}
}

// Arguments of types it cannot see into are marked, not printed wrongly or panicked on.
func TestUnsupportedMarked(t *testing.T) {
	if got := Sprintf("%v %d", custom{}, name("x")); got != "%!v(unsupported) %!d(unsupported)" {
		t.Errorf("got %q", got)
	}
	if got := Sprintf("%"); got != "%!(NOVERB)" {
		t.Errorf("got %q", got)
	}
}

// Errorf wraps as fmt.Errorf wraps: errors.Is sees every %w argument, and the message is
// fmt's.
func TestErrorfWraps(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	e1 := Errorf("rules[%d]: %w", 3, a)
	if e1.Error() != fmt.Errorf("rules[%d]: %w", 3, a).Error() || !errors.Is(e1, a) || errors.Unwrap(e1) != a {
		t.Errorf("one %%w: %v", e1)
	}
	e2 := Errorf("%w and %w", a, b)
	if e2.Error() != "a and b" || !errors.Is(e2, a) || !errors.Is(e2, b) {
		t.Errorf("two %%w: %v", e2)
	}
	e0 := Errorf("no wrap %d", 1)
	if e0.Error() != "no wrap 1" || errors.Unwrap(e0) != nil {
		t.Errorf("no %%w: %v", e0)
	}
	if got, want := Errorf(wrapVerb, "not an error").Error(), fmt.Errorf(wrapVerb, "not an error").Error(); got != want {
		t.Errorf("%%w of a string: %q", got)
	}
	if got := Sprintf(wrapVerb, 1); got != fmt.Sprintf(wrapVerb, 1) {
		t.Errorf("Sprintf %%w: %q", got)
	}
}

func BenchmarkSprintf(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Sprintf("ratelimit: rule %q: adaptive limit %d -> %d", "api", 100, 90)
	}
}
