package config

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFilterState checks the top-level filter_state switch: off by default and left out of
// the effective configuration then, kept through it when on, and refused when not a boolean.
func TestFilterState(t *testing.T) {
	require.False(t, mustParse(t, oneRule(tb)).FilterState)
	c := mustParse(t, `{"filter_state":true,"rules":[{"name":"r",`+tb+`}]}`)
	require.True(t, c.FilterState)
	out, err := json.Marshal(c)
	require.NoError(t, err)
	require.True(t, mustParse(t, string(out)).FilterState, "%s", out)
	out, _ = json.Marshal(mustParse(t, oneRule(tb)))
	require.NotContains(t, string(out), "filter_state")
	_, err = Parse([]byte(`{"filter_state":"yes","rules":[{"name":"r",` + tb + `}]}`))
	require.ErrorContains(t, err, `filter_state: want true or false, got "yes"`)
}
