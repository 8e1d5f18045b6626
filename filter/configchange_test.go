package filter

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
)

// A configuration change never hands a client allowance it did not have: each row of
// filtertest.ConfigChangeRows exhausts (or uses) a key under one rule, then asks under the
// changed rule on the same store. The emulator module's moduletest runs the same rows against
// the compiled module on one shared data.
func TestConfigChangeNeverGrantsAllowance(t *testing.T) {
	for _, row := range filtertest.ConfigChangeRows {
		t.Run(row.Name, func(t *testing.T) {
			store := sharedstate.NewMemory()
			d := newNativeWithStore(t, filtertest.ConfigChangeRule(row.Before), store)
			row.UseBefore(t, d)
			stop(d)
			d = newNativeWithStore(t, filtertest.ConfigChangeRule(row.After), store)
			defer stop(d)
			row.CheckAfter(t, d)
		})
	}
}
