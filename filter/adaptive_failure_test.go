package filter

import (
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/sharedstate/memstore"
	"github.com/stretchr/testify/require"
)

// An adaptive rule's denial when its shared data fails (failure_mode "deny") states the limit
// in force, in X-RateLimit-Limit as in RateLimit-Policy and the ratelimit_adaptive_limit
// gauge, not the rule's max_limit: a client told the larger limit would pace itself above what
// the rule admits.
func TestAdaptiveFailureDenialStatesTheLimitInForce(t *testing.T) {
	store := &failingStore{Memory: memstore.New()}
	d := newNativeWithStore(t, `{"failure_mode":"deny","rate_limit_headers":"both","rules":[{"name":"ad","algorithm":"adaptive","window":"1s",
		"adaptive":{"min_limit":5,"max_limit":100,"target_latency":"100ms","interval":"1s"}}]}`, store)
	at := time.Duration(0)
	// Errors from the upstream shrink the limit, one interval at a time.
	for i := range 4 {
		for range 20 {
			*d.now = t0.Add(at)
			id := d.host.InitializeHttpContext()
			d.host.CallOnRequestHeaders(id, step{}.RequestHeaders(), true)
			status := "503"
			if i == 0 {
				status = "200" // the first tick only starts the controller's interval
			}
			d.host.CallOnResponseHeaders(id, [][2]string{{":status", status}}, true)
			d.host.CompleteHttpContext(id)
		}
		at += time.Second
		*d.now = t0.Add(at)
		d.host.Tick()
	}
	inForce, err := d.host.GetGaugeMetric("ratelimit_adaptive_limit;rule=ad")
	require.NoError(t, err)
	require.Less(t, inForce, uint64(100), "the errors did not shrink the limit: the test set nothing up")

	store.failGet, store.failSet = true, true
	out := d.Do(t, t0.Add(at), step{})
	require.Equal(t, 429, out.Status, "failure_mode deny")
	want := strconv.FormatUint(inForce, 10)
	require.Equal(t, want, out.Headers["x-ratelimit-limit"], "X-RateLimit-Limit states the limit in force")
	require.Equal(t, `"ad";q=`+want+`;w=1`, out.Headers["ratelimit-policy"], "RateLimit-Policy states the same limit")
}
