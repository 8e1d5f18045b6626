package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckEffective checks that check -effective prints the effective configuration of a
// bootstrap's filter and of a plugin configuration alone, defaults filled in.
func TestCheckEffective(t *testing.T) {
	var out, errOut bytes.Buffer
	example := "../../../filter/config/testdata/examples/adaptive.json"
	require.Equal(t, 0, runCheck([]string{"-effective", "../../../envoy.yaml", example}, &out, &errOut), "%s%s", &out, &errOut)
	lines := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if where, js, ok := strings.Cut(l, " effective configuration: "); ok {
			lines[where] = js
		}
	}
	require.Contains(t, lines, "../../../envoy.yaml: listener ingress:", out.String())
	var eff struct {
		CASAttempts int `json:"cas_attempts"`
		Rules       []struct {
			Scope string `json:"scope"`
		} `json:"rules"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[example+":"]), &eff), out.String())
	require.Equal(t, 8, eff.CASAttempts)
	require.NotEmpty(t, eff.Rules)
	require.Equal(t, "local", eff.Rules[0].Scope)
}
