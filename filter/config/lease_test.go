package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLeaseParse checks that a lease block is read into Rule.Lease with its default ttl, and
// that a rule without one has none.
func TestLeaseParse(t *testing.T) {
	c, err := Parse([]byte(`{"rules":[
		{"name":"a","algorithm":"token_bucket","limit":100,"window":"1s","lease":{"batch":10}},
		{"name":"b","algorithm":"gcra","limit":100,"window":"1s","lease":{"batch":5,"ttl":"250ms"}},
		{"name":"c","algorithm":"fixed_window","limit":100,"window":"1s"}]}`))
	require.NoError(t, err)
	require.Equal(t, &Lease{Batch: 10, TTL: DefaultLeaseTTL}, c.Rules[0].Lease)
	require.Equal(t, &Lease{Batch: 5, TTL: 250 * time.Millisecond}, c.Rules[1].Lease)
	require.Nil(t, c.Rules[2].Lease)
}

// TestLeaseRefused checks the clear errors for the algorithms where reserving units ahead is
// not sound, for a shadow rule (which takes no lease), and for a malformed block.
func TestLeaseRefused(t *testing.T) {
	cases := []struct{ rule, want string }{
		{`"algorithm":"sliding_window","variant":"log","limit":10,"window":"1s","lease":{"batch":2}`,
			`rules[0].lease: not supported by sliding_window variant "log": it records one timestamp per request`},
		{`"algorithm":"leaky_bucket","mode":"shape","max_delay":"1s","limit":10,"window":"1s","lease":{"batch":2}`,
			`rules[0].lease: not supported in mode "shape": the shaper schedules each request's release`},
		{`"algorithm":"adaptive","window":"1s","adaptive":{"min_limit":10,"max_limit":100},"lease":{"batch":2}`,
			`rules[0].lease: not supported by algorithm adaptive: its limit changes while units are reserved`},
		{`"algorithm":"token_bucket","limit":10,"window":"1s","shadow":true,"lease":{"batch":2}`,
			`rules[0].lease: not supported on a shadow rule: it observes exact decisions and takes no lease`},
		{`"algorithm":"token_bucket","limit":10,"window":"1s","lease":{}`, `rules[0].lease.batch: required`},
		{`"algorithm":"token_bucket","limit":10,"window":"1s","lease":{"batch":1}`, `rules[0].lease.batch: must be between 2 and 1000000, got 1`},
		{`"algorithm":"token_bucket","limit":10,"window":"1s","lease":{"batch":2,"size":3}`, `rules[0].lease.size: unknown field`},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(`{"rules":[{"name":"r",` + tc.rule + `}]}`))
		require.Error(t, err, tc.rule)
		require.Contains(t, err.Error(), tc.want, tc.rule)
	}
}
