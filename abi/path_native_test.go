//go:build !wasip1

package abi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPropertyPath pins a property path's form: the segments joined as appendPath joins
// them for proxy_get_property, which the native build splits back into the segments.
func TestPropertyPath(t *testing.T) {
	p := PropertyPath("source\x00address")
	require.Equal(t, string(appendPath(nil, []string{"source", "address"})), string(p))
	require.Equal(t, []string{"source", "address"}, p.segments())
}
