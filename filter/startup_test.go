package filter

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfiguredLog checks the info line a successful configuration logs.
func TestConfiguredLog(t *testing.T) {
	d := newNative(t, `{"rules":[`+
		`{"name":"a","algorithm":"fixed_window","limit":3,"window":"1h"},`+
		`{"name":"b","algorithm":"token_bucket","limit":3,"window":"1s"}]}`)
	require.Contains(t, d.host.GetInfoLogs(), "ratelimit: configured 2 rules")
}
