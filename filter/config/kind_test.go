package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The parser records each key part's source kind, and the request path reads the kind, not
// Source: every source must map to its own kind, and a parsed rule's kinds must be those of
// its parts' sources, or AppendKey would read another source than the configuration names.
func TestKeyKindsFollowSources(t *testing.T) {
	sources := []Source{SourceClientIP, SourceHeader, SourceQuery, SourcePath, SourceMethod, SourceRoute, SourceConst}
	seen := map[sourceKind]Source{}
	for _, s := range sources {
		k := kindOf(s)
		require.NotEqual(t, kindUnknown, k, s)
		_, dup := seen[k]
		require.False(t, dup, "%s shares kind %d with %s", s, k, seen[k])
		seen[k] = s
	}
	require.Equal(t, kindUnknown, kindOf("cookie"))

	c, err := Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":1,"window":"1s","key":[
		{"source":"client_ip"},{"source":"header","name":"x-a"},{"source":"query","name":"q"},{"source":"path"},
		{"source":"method"},{"source":"route"},{"source":"const","value":"v"}]}]}`))
	require.NoError(t, err)
	r := c.Rules[0]
	require.Len(t, r.keyKinds, len(r.Key))
	for i := range r.Key {
		require.Equal(t, kindOf(r.Key[i].Source), r.keyKinds[i], "part %d", i)
	}
	// A rule made without the parser, or whose key parts changed since, reads Source.
	r.Key = append(r.Key, KeyPart{Source: SourceConst, Value: "w"})
	require.Equal(t, kindConst, r.keyKind(len(r.Key)-1))
	q := req("x-a: a")
	q.path, q.route = "/p?q=1", "rt"
	key, ok := r.AppendKey(nil, q)
	require.True(t, ok)
	require.Equal(t, "9:192.0.2.11:a1:12:/p3:GET2:rt1:v1:w", string(key))
}
