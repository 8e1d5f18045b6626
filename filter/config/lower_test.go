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

// flatName turns '.' and '-' into '_' like the strings.Map it replaces, for every name a rule
// may have (see isName).
func TestFlatName(t *testing.T) {
	mapped := func(s string) string {
		return strings.Map(func(c rune) rune {
			if c == '.' || c == '-' {
				return '_'
			}
			return c
		}, s)
	}
	for _, s := range []string{"a", "a.b-c_d", "...", "---", "A-9.z", strings.Repeat("x.-", 21)} {
		require.True(t, isName(s), s)
		require.Equal(t, mapped(s), flatName(s), s)
	}
}
