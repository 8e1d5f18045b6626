package moduletest

import (
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// A shadow local rule never denies, not even when its shared data fails under top-level
// failure_mode "deny": the compiled module counts the failure in store_errors_total and lets
// the request through, while an enforced rule on the same failing store still answers 429.
// (Envoy's shared data does not fail like this; the host's fault hook stands for any failure
// a future host might report.)
func TestShadowRuleStoreFailureNeverDeniesWasm(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		write bool // fail writes only; otherwise reads and writes
	}{{"reads fail", false}, {"writes fail", true}} {
		t.Run(c.name, func(t *testing.T) {
			shared := wasmhost.NewSharedData()
			d := newWasm(t, `{"failure_mode":"deny","rules":[
				{"name":"dry","shadow":true,"continue":true,"algorithm":"fixed_window","limit":5,"window":"1m"},
				{"name":"enforced","match":{"path":{"prefix":"/enforced"}},"algorithm":"fixed_window","limit":5,"window":"1m"}]}`,
				wasmOptions{shared: shared})
			shared.SetFault(func(key string, write bool) wasmhost.Status {
				if strings.Contains(key, "|dry|") && (write || !c.write) {
					return wasmhost.StatusInternalFailure
				}
				return wasmhost.StatusOK
			})
			for i := range 3 {
				require.Zero(t, d.Do(t, t0, step{Path: "/x"}).Status, "request %d", i)
			}
			require.EqualValues(t, 3, hostMetric(t, d.host, "ratelimit_store_errors_total;rule=dry"))
			require.Zero(t, hostMetric(t, d.host, "ratelimit_requests_total;rule=dry;decision=shadow_denied"))

			shared.SetFault(func(key string, write bool) wasmhost.Status {
				if strings.Contains(key, "|enforced|") && (write || !c.write) {
					return wasmhost.StatusInternalFailure
				}
				return wasmhost.StatusOK
			})
			require.Equal(t, 429, d.Do(t, t0, step{Path: "/enforced"}).Status, "an enforced rule still fails closed")
			require.Zero(t, d.host.Stats().Traps)
		})
	}
}
