package filter

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/stretchr/testify/require"
)

// A key header's duplicate check reads its lines from the full header map before the key is
// built; Header then answers from those lines (Envoy's single-value lookup returns the first
// line) instead of calling the host again. The header is removed from the host's map between
// the two reads: a second host call would see it gone.
func TestHeaderAfterLinesCallsNoHost(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"r","key":[{"source":"header","name":"x-tenant"}],"algorithm":"token_bucket","limit":10,"window":"1s"}]}`)
	id := d.host.InitializeHttpContext()
	d.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, {"x-tenant", "acme"}}, true)
	defer d.host.CompleteHttpContext(id)

	var r request
	first, _, n := r.HeaderLines("x-tenant")
	require.Equal(t, "acme", first)
	require.Equal(t, 1, n)
	require.NoError(t, abi.RemoveHttpRequestHeader("x-tenant"))
	v, ok := r.Header("x-tenant")
	require.True(t, ok)
	require.Equal(t, "acme", v, "answered from the lines already read")

	// The host's map did change: a request that has not read the lines sees the header gone,
	// so the assertion above would fail if Header called the host.
	var fresh request
	_, ok = fresh.Header("x-tenant")
	require.False(t, ok)
	// An absent header read as lines is absent for Header too.
	_, _, n = fresh.HeaderLines("x-other")
	require.Zero(t, n)
	_, ok = fresh.Header("x-other")
	require.False(t, ok)
}
