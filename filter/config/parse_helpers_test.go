package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// lowerASCII is strings.ToLower, including for non-ASCII and invalid UTF-8 input, and returns
// a lower-case ASCII name without copying it.
func TestLowerASCII(t *testing.T) {
	for _, s := range []string{"", "x-tenant", "X-Tenant", ":AUTHORITY", "ABC", "a\x80b", "Ünïcode-X",
		"K\u212aelvin", "İstanbul", "\xff\xfe", "x_y.Z-1", "@[`{"} {
		require.Equal(t, strings.ToLower(s), lowerASCII(s), "%q", s)
	}
	for i := range 256 {
		for _, s := range []string{string(rune(i)), string([]byte{byte(i)}), "A" + string([]byte{byte(i)}) + "z"} {
			require.Equal(t, strings.ToLower(s), lowerASCII(s), "%q", s)
		}
	}
	require.Zero(t, testing.AllocsPerRun(10, func() { _ = lowerASCII("x-tenant") }))
}

// sameFlat compares names as the strings.Map that turns '.' and '-' into '_' would, for every
// pair of names a rule may have (see isName).
func TestSameFlat(t *testing.T) {
	mapped := func(s string) string {
		return strings.Map(func(c rune) rune {
			if c == '.' || c == '-' {
				return '_'
			}
			return c
		}, s)
	}
	names := []string{"a", "b", "a.b-c_d", "a_b_c_d", "a-b.c.d", "a.b-c_e", "...", "---", "___", "..",
		"A-9.z", "A_9_z", "a-9.z", strings.Repeat("x.-", 21), strings.Repeat("x__", 21)}
	for _, a := range names {
		require.True(t, isName(a), a)
		for _, b := range names {
			require.Equal(t, mapped(a) == mapped(b), sameFlat(a, b), "%q %q", a, b)
		}
	}
}
