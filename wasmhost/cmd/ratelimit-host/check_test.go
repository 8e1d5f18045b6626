package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

// TestCheckRuleViolations checks what check prints for a bootstrap that breaks Envoy's API
// rules twice: one error per violation, at its YAML line, with the field's path in the file's
// names, and the count.
func TestCheckRuleViolations(t *testing.T) {
	shipped, err := os.ReadFile("../../../envoy.yaml")
	require.NoError(t, err)
	bad := string(shipped)
	for _, e := range [][2]string{
		{"stat_prefix: ingress_http", `stat_prefix: ""`},
		{"- name: envoy.filters.http.router", `- name: ""`},
	} {
		require.Contains(t, bad, e[0], "the mutation no longer applies to envoy.yaml")
		bad = strings.Replace(bad, e[0], e[1], 1)
	}
	line := func(at string) int { return strings.Count(bad[:strings.Index(bad, at)], "\n") + 1 }
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o644))

	var out, errOut bytes.Buffer
	require.Equal(t, 1, runCheck([]string{path}, &out, &errOut), "%s%s", &out, &errOut)
	const hcm = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config."
	require.Equal(t, fmt.Sprintf(path+": error: YAML line %d: "+hcm+"stat_prefix: value length must be at least 1 runes\n"+
		path+": error: YAML line %d: "+hcm+"http_filters[1].name: value length must be at least 1 runes\n"+
		path+": FAILED (2 errors, 0 warnings)\n", line(`stat_prefix: ""`), line(`- name: ""`)), out.String())
	require.Empty(t, errOut.String())
}
