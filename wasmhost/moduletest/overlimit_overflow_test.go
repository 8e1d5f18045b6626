package moduletest

import (
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A denial decided on the overflow key is not the key's own: the over-limit cache does not
// keep it, and once the key table has room again the client is admitted by the exact decision
// (filtertest.OverflowCacheRules, on Redis's real clock; package filter runs the same sequence
// natively on a fake one).
func TestOverLimitCacheKeepsNoOverflowDenialWasm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := newGlobalHost(t, globalConfig(redisOpts{}, filtertest.OverflowCacheRules), srv.WebdisURL(), 1)
	start := time.Now()
	for range filtertest.ARequests {
		o, _ := doTimed(t, h, hdr("x-k", "a"))
		require.Zero(t, o.Status, "a takes the rule's one key")
	}
	time.Sleep(time.Until(start.Add(filtertest.OverflowAt)))
	denied := false
	for range 4 {
		if o, _ := doTimed(t, h, hdr("x-k", "b")); o.Status == 429 {
			denied = true
			break
		}
	}
	require.True(t, denied, "the overflow key must deny b")
	require.Less(t, time.Since(start), filtertest.FreedAt-2*time.Second, "too slow to test: b's overflow denial may have expired")
	time.Sleep(time.Until(start.Add(filtertest.FreedAt)))
	calls := redisMetric(h, "ratelimit_redis_calls_total")
	o, _ := doTimed(t, h, hdr("x-k", "b"))
	require.Zero(t, o.Status, "a's key has expired: b gets a key of its own and is admitted")
	require.Greater(t, redisMetric(h, "ratelimit_redis_calls_total"), calls, "decided by Redis, not from the cache")
	requireNoRedisFailures(t, h)
}
