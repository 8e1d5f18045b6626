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
