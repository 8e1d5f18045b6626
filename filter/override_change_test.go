package filter

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/memstore"
)

// An override changes the parameters a key is decided under, not where its state is: adding,
// re-spelling, narrowing or removing an override grants a key that has used its allowance
// nothing (filtertest.OverrideChangeConfigs, at one instant), for local rules on one shared
// store and for global rules on one Redis. The emulator module's moduletest runs the same
// configurations against the compiled module.
func TestOverrideChangeNeverGrantsAllowance(t *testing.T) {
	for _, algo := range filtertest.OverrideChangeAlgorithms {
		t.Run("local "+algo, func(t *testing.T) {
			store := memstore.New()
			filtertest.CheckOverrideChanges(t, filtertest.OverrideChangeConfigs("local", algo), func(t *testing.T, rules string) func() bool {
				d := newNativeWithStore(t, `{"rules":`+rules+`}`, store)
				return func() bool {
					return d.Do(t, filtertest.T0, filtertest.Step{Headers: [][2]string{hdr("x-k", "free-alice")}}).Status == 0
				}
			})
		})
	}
	srv := redistest.Start(t)
	for _, algo := range filtertest.OverrideChangeAlgorithms {
		t.Run("global "+algo, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			filtertest.CheckOverrideChanges(t, filtertest.OverrideChangeConfigs("global", algo), func(t *testing.T, rules string) func() bool {
				l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, rules), 1, 1)
				return func() bool {
					ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "free-alice"))
					return ok
				}
			})
		})
	}
}
