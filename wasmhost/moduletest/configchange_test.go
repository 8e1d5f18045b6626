package moduletest

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
)

// A configuration change never hands a client allowance it did not have, against the compiled
// module: the old and the new configuration run in two hosts on one shared data, as Envoy runs
// old and new VMs during an update (the rows are filtertest.ConfigChangeRows, which package
// filter runs natively).
func TestConfigChangeNeverGrantsAllowance(t *testing.T) {
	t.Parallel()
	for _, row := range filtertest.ConfigChangeRows {
		t.Run(row.Name, func(t *testing.T) {
			shared := wasmhost.NewSharedData()
			row.UseBefore(t, newWasm(t, filtertest.ConfigChangeRule(row.Before), wasmOptions{shared: shared}))
			row.CheckAfter(t, newWasm(t, filtertest.ConfigChangeRule(row.After), wasmOptions{shared: shared}))
		})
	}
}
