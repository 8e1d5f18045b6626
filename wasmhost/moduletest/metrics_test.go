package moduletest

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/stretchr/testify/require"
)

// TestMetricScenariosWasm runs filtertest.MetricScenarios against the compiled module: the
// requests, then the counters they leave in the host's stats.
func TestMetricScenariosWasm(t *testing.T) {
	t.Parallel()
	for _, ms := range filtertest.MetricScenarios {
		t.Run(ms.Name, func(t *testing.T) {
			d := newWasm(t, ms.Config, wasmOptions{})
			ms.Check(t, d, func(name string) int64 { return hostMetric(t, d.host, name) })
			require.Zero(t, d.host.Stats().Traps, "the VM must never trap")
		})
	}
}
