package filter

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/stretchr/testify/require"
)

// Redis failures are logged at warn as the README says: the first failure in a row, then every
// power of two of them, and the breaker's opening; not one line per failed request, nor one
// per failed probe while the breaker stays open.
func TestRedisFailuresLoggedFirstThenPowersOfTwo(t *testing.T) {
	rules := `[{"name":"g","scope":"global","key":[{"source":"header","name":"x-api-key"}],"algorithm":"gcra","limit":5,"window":"1m"}]`
	failures := func(d *nativeDriver) []string {
		var out []string
		for _, l := range d.host.GetWarnLogs() {
			if strings.Contains(l, "redis failed") {
				out = append(out, l)
			}
		}
		return out
	}
	fail := func(t *testing.T, d *nativeDriver) {
		t.Helper()
		id, callout := d.startGlobal(t, "k")
		d.host.CallOnHttpCallResponse(callout, [][2]string{{":status", "503"}}, nil, nil)
		d.host.CompleteHttpContext(id)
	}

	t.Run("breaker never opens", func(t *testing.T) {
		d := newNative(t, filtertest.GlobalConfig(filtertest.RedisOpts{FailureMode: "allow"}, rules))
		for range 20 {
			fail(t, d)
		}
		logs := failures(d)
		require.Len(t, logs, 5, "failures 1, 2, 4, 8 and 16 of 20: %q", logs)
		for i, n := range []string{"1", "2", "4", "8", "16"} {
			require.Contains(t, logs[i], "redis failed "+n+" times in a row")
		}
	})

	t.Run("breaker opens at 3", func(t *testing.T) {
		d := newNative(t, filtertest.GlobalConfig(filtertest.RedisOpts{FailureMode: "allow", Failures: 3, Cooldown: "1s"}, rules))
		for range 3 {
			fail(t, d)
		}
		// Each cooldown lets one probe through, which fails and opens the breaker again:
		// failures 4 to 10.
		for range 7 {
			*d.now = d.now.Add(1100 * time.Millisecond)
			fail(t, d)
		}
		logs := failures(d)
		require.Len(t, logs, 5, "failures 1 and 2, the opening at 3, then 4 and 8: %q", logs)
		require.Contains(t, logs[2], "redis failed 3 times in a row")
		require.Contains(t, logs[2], "the breaker opens")
		require.Contains(t, logs[3], "redis failed 4 times in a row")
		require.Contains(t, logs[4], "redis failed 8 times in a row")
	})
}
