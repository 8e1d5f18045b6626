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

// TestCheckPreviousTrustedHops checks what check -previous prints when trusted_hops changes:
// the client_ip rule's keys read another address, a reset (with its warning, which -strict
// fails), while a rule keyed on a header keeps its state.
func TestCheckPreviousTrustedHops(t *testing.T) {
	const rules = `"rules":[{"name":"ip","continue":true,"key":[{"source":"client_ip","ipv6_prefix":64}],"algorithm":"fixed_window","limit":10,"window":"1m"},
		{"name":"user","key":[{"source":"header","name":"x-user"}],"algorithm":"fixed_window","limit":10,"window":"1m"}]}`
	dir := t.TempDir()
	oldPath, newPath := filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json")
	require.NoError(t, os.WriteFile(oldPath, []byte(`{`+rules), 0o644))
	require.NoError(t, os.WriteFile(newPath, []byte(`{"trusted_hops":2,`+rules), 0o644))

	var out, errOut bytes.Buffer
	require.Equal(t, 0, runCheck([]string{"-previous", oldPath, newPath}, &out, &errOut), "%s%s", &out, &errOut)
	const reset = `rule "ip": reset (trusted_hops 0 -> 2: client_ip reads another hop of X-Forwarded-For, so clients count under another address)`
	require.Contains(t, out.String(), newPath+": change: "+reset+"\n")
	require.Contains(t, out.String(), newPath+": change: rule \"user\": kept\n")
	require.Contains(t, out.String(), newPath+": warning: "+reset+": its clients start afresh with their whole allowance\n")

	out.Reset()
	require.Equal(t, 1, runCheck([]string{"-strict", "-previous", oldPath, newPath}, &out, &errOut), "%s%s", &out, &errOut)
}
