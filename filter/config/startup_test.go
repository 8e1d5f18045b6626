package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The default deny body's parts, written out so that configure need not compile the
// template, are what compileBody makes of defaultDenyBody: a change to either that the other
// does not follow fails here.
func TestDefaultBodyIsCompiled(t *testing.T) {
	want, msg := compileBody(defaultDenyBody)
	require.Empty(t, msg)
	require.Equal(t, want, defaultBody[:])
	d := defaultDeny()
	require.Equal(t, defaultDenyBody, d.Body)
	require.Equal(t, `{"error":"rate_limited","rule":"api","retry_after":3}`, string(d.AppendBody(nil, "api", 3)))
}

// Parse calls a config empty exactly when bytes.TrimSpace leaves nothing of it, also for
// Unicode white space (which the check for a printable ASCII byte does not settle), and
// hasPrintableASCII finds a printable byte wherever it is.
func TestEmptyConfigAsTrimSpace(t *testing.T) {
	for _, s := range []string{"", " \n", "\v\f\r\t", "\u00a0", "\u0085 \u2028", "\u3000\n"} {
		_, err := Parse([]byte(s))
		require.EqualError(t, err, "config is empty: at least one rule is required", "%q", s)
	}
	for _, s := range []string{"\u00a0x", "\x7f", "\u00e9", "\x00"} {
		_, err := Parse([]byte(s))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "config is empty", "%q", s)
	}
	require.False(t, hasPrintableASCII([]byte(" \t\n\x7f\u00a0")))
	require.True(t, hasPrintableASCII([]byte("   \n}")))
	require.True(t, hasPrintableASCII([]byte("{")))
}
