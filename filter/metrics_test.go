package filter

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/stretchr/testify/require"
)

// TestMetricScenariosNative runs filtertest.MetricScenarios natively: the requests, then the
// counters they leave.
func TestMetricScenariosNative(t *testing.T) {
	for _, ms := range filtertest.MetricScenarios {
		t.Run(ms.Name, func(t *testing.T) {
			d := newNative(t, ms.Config)
			ms.Check(t, d, func(name string) int64 { return int64(counterNative(d, name)) })
		})
	}
}

func gaugeNative(t *testing.T, d *nativeDriver, name string) int64 {
	t.Helper()
	v, err := d.host.GetGaugeMetric(name)
	require.NoError(t, err)
	return int64(v)
}

func counterNative(d *nativeDriver, name string) uint64 {
	v, _ := d.host.GetCounterMetric(name)
	return v
}
