package filter

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfiguredLog checks the info line a successful configuration logs. It is written
// without the formatter (abi.LogInfo), so that a valid configuration does not make V8 compile
// strfmt's printer in proxy_on_configure; the line must stay what LogInfof wrote.
func TestConfiguredLog(t *testing.T) {
	d := newNative(t, `{"rules":[`+
		`{"name":"a","algorithm":"fixed_window","limit":3,"window":"1h"},`+
		`{"name":"b","algorithm":"token_bucket","limit":3,"window":"1s"}]}`)
	require.Contains(t, d.host.GetInfoLogs(), "ratelimit: configured 2 rules")
}
