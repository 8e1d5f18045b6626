package moduletest

import (
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// storeFailureDriver is a wasm driver whose shared data fails on purpose through the host's
// fault hook (filtertest.StoreFailureDriver). Envoy's shared data does not fail like this;
// the hook stands for any failure a future host might report.
type storeFailureDriver struct {
	*wasmDriver
	shared *wasmhost.SharedData
}

// Metric reads a counter or gauge of the filter, which must be defined.
func (d storeFailureDriver) Metric(t *testing.T, name string) int64 {
	return hostMetric(t, d.host, name)
}

// FailStore makes the host's shared data fail for rule's keys.
func (d storeFailureDriver) FailStore(rule string, reads, writes bool) {
	d.shared.SetFault(func(key string, write bool) wasmhost.Status {
		if strings.Contains(key, "|"+rule+"|") && (write && writes || !write && reads) {
			return wasmhost.StatusInternalFailure
		}
		return wasmhost.StatusOK
	})
}

// A shadow local rule never denies, not even when its shared data fails under top-level
// failure_mode "deny", while an enforced rule on a store failing alike still answers 429
// (filtertest.StoreFailure.CheckShadowNeverDenies, which package filter runs natively).
func TestShadowRuleStoreFailureNeverDeniesWasm(t *testing.T) {
	t.Parallel()
	for _, f := range filtertest.StoreFailures {
		t.Run(f.Name, func(t *testing.T) {
			shared := wasmhost.NewSharedData()
			d := newWasm(t, filtertest.ShadowStoreConfig, wasmOptions{shared: shared})
			f.CheckShadowNeverDenies(t, storeFailureDriver{d, shared})
			require.Zero(t, d.host.Stats().Traps)
		})
	}
}
