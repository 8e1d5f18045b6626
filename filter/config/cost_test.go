package config

import "testing"

// ParseDecimal takes digits only, whatever surrounds or follows them, saturates at
// DecimalCeiling, and allocates nothing for any value a client may send.
func TestParseDecimal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"7", 7, true}, {" 42\t", 42, true}, {"007", 7, true},
		{"999999999999999999", 999999999999999999, true}, {"000", 0, true},
		{"0000000000000000000000005", 5, true}, {"00000000000000000001000000000000000000", DecimalCeiling, true},
		{"", 0, false}, {" ", 0, false}, {"+5", 0, false}, {"-5", 0, false}, {"1_000", 0, false},
		{"1x", 0, false}, {"1.5", 0, false}, {"0x10", 0, false}, {"1 2", 0, false},
		{"1000000000000000000", DecimalCeiling, true}, {"99999999999999999999999", DecimalCeiling, true},
		{" 18446744073709551616 ", DecimalCeiling, true}, {"99999999999999999999x", 0, false},
		{"-99999999999999999999", 0, false},
	} {
		if n, ok := ParseDecimal(tc.in); n != tc.want || ok != tc.ok {
			t.Errorf("ParseDecimal(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.want, tc.ok)
		}
		if a := testing.AllocsPerRun(10, func() { ParseDecimal(tc.in) }); a != 0 {
			t.Errorf("ParseDecimal(%q) allocates %v times", tc.in, a)
		}
	}
	if n, ok := parseCost("3", 2); ok || n != 3 {
		t.Errorf("parseCost above max = %d, %v; want refused", n, ok)
	}
	if _, ok := parseCost("0", 10); ok {
		t.Error("parseCost accepted 0")
	}
	if _, ok := parseCost("100000000000000000000", 10); ok {
		t.Error("parseCost accepted a value too large for an int64")
	}
}
