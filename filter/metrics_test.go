package filter

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
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
