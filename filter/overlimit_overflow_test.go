package filter

import (
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A denial decided on the overflow key is not the key's own: the over-limit cache does not
// keep it. Once the key table has room again the client gets a key of its own, and the exact
// decision (a callout) admits it, where a cached overflow denial would deny it on the proxy for
// the overflow key's whole wait. The emulator module's moduletest runs the same sequence
// against the compiled module on Redis's real clock.
func TestOverLimitCacheKeepsNoOverflowDenial(t *testing.T) {
	srv := redistest.Start(t)
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, filtertest.OverflowCacheRules), 1, 1)
	start := l.now
	at := func(d time.Duration) { l.now = start + int64(d) }
	for range filtertest.ARequests {
		ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "a"))
		require.True(t, ok, "a takes the rule's one key")
	}
	at(filtertest.OverflowAt)
	denied := false
	for range 4 {
		if ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "b")); !ok {
			denied = true
			break
		}
	}
	require.True(t, denied, "the overflow key must deny b")
	at(filtertest.FreedAt)
	ok, calls := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "b"))
	require.True(t, ok, "a's key has expired: b gets a key of its own and is admitted (%d callouts)", calls)
	require.Positive(t, calls)
}
