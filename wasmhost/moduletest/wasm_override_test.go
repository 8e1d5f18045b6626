package moduletest

import (
	"fmt"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// TestGlobalWasmOverrides: a global rule's per-value overrides are decided in Redis with their
// own limits, by the compiled module against real webdis and Redis. Two proxies share each
// override's count, as they share the rule's.
func TestGlobalWasmOverrides(t *testing.T) {
	t.Parallel()
	// Unpartitioned, and with the rule's keys spread over 16 hash tags (redis.partitions):
	// an override's keys must stay in the slots of the rule's key sets.
	for _, parts := range []int{0, 16} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) { globalOverrides(t, parts) })
	}
}

func globalOverrides(t *testing.T, partitions int) {
	srv := redistest.Start(t)
	loadScripts(t, srv)
	rule := `{"name":"tiers","key":[{"source":"header","name":"x-user"}],"scope":"global",
		"algorithm":"token_bucket","limit":2,"window":"1h",
		"overrides":[{"exact":"gold","limit":4},{"prefix":"svc-","unlimited":true}]}`
	cfg := globalConfig(redisOpts{Timeout: "5s", FailureMode: "deny", Partitions: partitions}, "["+rule+"]")
	proxies := [2]*wasmhost.Host{newGlobalHost(t, cfg, srv.WebdisURL(), 2), newGlobalHost(t, cfg, srv.WebdisURL(), 2)}
	admitted := func(user string, n int) int {
		ok := 0
		for i := range n {
			o, _ := doTimed(t, proxies[i%2], [2]string{"x-user", user})
			if o.Status == 0 {
				ok++
			} else {
				require.Equal(t, 429, o.Status)
			}
		}
		return ok
	}
	require.Equal(t, 2, admitted("plain", 6), "an ordinary key has the rule's limit")
	require.Equal(t, 4, admitted("gold", 8), "the exact override admits its own limit, across both proxies")
	require.Equal(t, 10, admitted("svc-a", 10), "an unlimited override is never limited")
	// A key's state belongs to the rule and the key: the override decides the rule's own key
	// for "gold", under its parameters.
	if partitions == 0 {
		require.EqualValues(t, 1, srv.MustDo("EXISTS", expectedKey("tiers", "gold")))
	}
	for _, p := range proxies {
		requireNoRedisFailures(t, p)
		requireCleanLogs(t, p)
	}
}

// An override changes the parameters a key is decided under, not where its state is: the
// configurations of filtertest.OverrideChangeConfigs, applied in turn to one shared data (local)
// or one Redis (global), admit free-alice 10 in all, as package filter checks natively. One
// worker each: the state is the store's, whichever worker reads it.
func TestOverrideChangeNeverGrantsAllowanceWasm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, algo := range filtertest.OverrideChangeAlgorithms {
		t.Run("local "+algo, func(t *testing.T) {
			shared := wasmhost.NewSharedData()
			filtertest.CheckOverrideChanges(t, filtertest.OverrideChangeConfigs("local", algo), func(t *testing.T, rules string) func() bool {
				d := newWasm(t, `{"rules":`+rules+`}`, wasmOptions{workers: 1, shared: shared})
				return func() bool {
					return d.Do(t, filtertest.T0, step{Headers: [][2]string{hdr("x-k", "free-alice")}}).Status == 0
				}
			})
		})
		t.Run("global "+algo, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			filtertest.CheckOverrideChanges(t, filtertest.OverrideChangeConfigs("global", algo), func(t *testing.T, rules string) func() bool {
				h := newGlobalHost(t, globalConfig(redisOpts{}, rules), srv.WebdisURL(), 1)
				return func() bool {
					o, _ := doTimed(t, h, hdr("x-k", "free-alice"))
					return o.Status == 0
				}
			})
		})
	}
}
