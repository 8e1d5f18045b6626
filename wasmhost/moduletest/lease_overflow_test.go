package moduletest

import (
	"fmt"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestGlobalWasmLeaseNeverOnOverflowKey: on the module, against real Redis, 100 new clients
// that find y's key bound reached are decided on y's overflow key, one request each, and a
// lease of batch 10 on y gives them what the exact decision gives them: the overflow key
// limits them as one client (limit 100), never limit/batch of them. Package filter tests the
// same natively (TestGlobalLeaseNeverOnOverflowKey).
func TestGlobalWasmLeaseNeverOnOverflowKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admitted := map[string]int{}
	for _, lease := range []string{"", `,"lease":{"batch":10,"ttl":"1m"}`} {
		name := map[bool]string{true: "exact", false: "leased"}[lease == ""]
		srv.MustDo("FLUSHALL")
		rules := `[{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"fixed_window","limit":100,"window":"1h","max_keys":4` + lease + `}]`
		h := newGlobalHost(t, globalConfig(redisOpts{}, rules), srv.WebdisURL(), 1)
		for i := range 4 {
			o, _ := doTimed(t, h, hdr("x-y", fmt.Sprint("fill", i)))
			require.Zero(t, o.Status)
		}
		for i := range 100 {
			if o, _ := doTimed(t, h, hdr("x-y", fmt.Sprint("new", i))); o.Status == 0 {
				admitted[name]++
			}
		}
		overflowed := redisMetric(h, "ratelimit_key_overflow_total;rule=y")
		require.EqualValues(t, 100, overflowed, name)
		requireNoRedisFailures(t, h)
	}
	require.Equal(t, 100, admitted["exact"])
	require.Equal(t, admitted["exact"], admitted["leased"])
}
