package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEnforcePercentAndNearLimitRatio checks the rules' effective enforce_percent and
// near_limit_ratio: the top level's when a rule has none, 100 for a shadow rule whatever the
// top level says, and the share in parts per million rounded to the nearest.
func TestEnforcePercentAndNearLimitRatio(t *testing.T) {
	c := mustParse(t, `{"enforce_percent":25,"near_limit_ratio":0.5,"rules":[
		{"name":"inherits","continue":true,`+tb+`},
		{"name":"own","continue":true,"enforce_percent":12.34567,"near_limit_ratio":0.9,`+tb+`},
		{"name":"dry","continue":true,"shadow":true,`+tb+`},
		{"name":"tells","enforce_percent":0,"shadow_request_header":"x-unenforced",`+tb+`}]}`)
	type want struct {
		percent float64
		ppm     uint32
		ratio   float64
	}
	for i, w := range []want{{25, 250_000, 0.5}, {12.34567, 123_457, 0.9}, {100, EnforceAll, 0.5}, {0, 0, 0.5}} {
		r := c.Rules[i]
		require.Equal(t, w.percent, r.EnforcePercent, r.Name)
		require.Equal(t, w.ppm, r.EnforcePPM, r.Name)
		require.Equal(t, w.ratio, r.NearLimitRatio, r.Name)
	}
	require.Equal(t, "x-unenforced", c.Rules[3].ShadowRequestHeader)

}
