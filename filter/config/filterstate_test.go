package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFilterState checks the top-level filter_state switch: off by default, on when set, and
// refused when not a boolean.
func TestFilterState(t *testing.T) {
	require.False(t, mustParse(t, oneRule(tb)).FilterState)
	c := mustParse(t, `{"filter_state":true,"rules":[{"name":"r",`+tb+`}]}`)
	require.True(t, c.FilterState)
	_, err := Parse([]byte(`{"filter_state":"yes","rules":[{"name":"r",` + tb + `}]}`))
	require.ErrorContains(t, err, `filter_state: want true or false, got "yes"`)
}
