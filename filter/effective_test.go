package filter

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEffectiveConfigLoggedAtDebug checks the promise of config.Config.MarshalJSON's
// documentation: on configure the filter logs the effective configuration at debug level,
// with the defaults the operator did not type filled in.
func TestEffectiveConfigLoggedAtDebug(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"r","algorithm":"token_bucket","limit":5,"window":"1s"}]}`)
	const prefix = "ratelimit: effective configuration: "
	var logged string
	for _, l := range d.host.GetDebugLogs() {
		if s, ok := strings.CutPrefix(l, prefix); ok {
			logged = s
		}
	}
	require.NotEmpty(t, logged, "no effective configuration among the debug logs %q", d.host.GetDebugLogs())
	var eff struct {
		Domain      string `json:"domain"`
		FailureMode string `json:"failure_mode"`
		CASAttempts int    `json:"cas_attempts"`
		Rules       []struct {
			Name  string `json:"name"`
			Scope string `json:"scope"`
		} `json:"rules"`
	}
	require.NoError(t, json.Unmarshal([]byte(logged), &eff), logged)
	require.Equal(t, "rl", eff.Domain)
	require.Equal(t, "allow", eff.FailureMode)
	require.Equal(t, 8, eff.CASAttempts)
	require.Len(t, eff.Rules, 1)
	require.Equal(t, "r", eff.Rules[0].Name)
	require.Equal(t, "local", eff.Rules[0].Scope)
}
