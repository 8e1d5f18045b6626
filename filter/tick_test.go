package filter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func TestShapingReleasesAtTheLeakRate(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"shape","algorithm":"leaky_bucket","mode":"shape",
		"limit":10,"window":"1s","burst":3,"max_delay":"250ms"}]}`)
	require.EqualValues(t, 25, d.host.GetTickPeriod(), "a quarter of the 100ms emission interval")
	var ids []uint32
	for range 5 {
		id := d.host.InitializeHttpContext()
		d.host.CallOnRequestHeaders(id, step{}.RequestHeaders(), true)
		ids = append(ids, id)
	}
	// The first leaves at once, the next two wait 100ms and 200ms, the last two would wait
	// longer than max_delay and are denied.
	require.Equal(t, types.ActionContinue, d.host.GetCurrentHttpStreamAction(ids[0]))
	require.Equal(t, types.ActionPause, d.host.GetCurrentHttpStreamAction(ids[1]))
	require.Equal(t, types.ActionPause, d.host.GetCurrentHttpStreamAction(ids[2]))
	for _, id := range ids[3:] {
		resp := d.host.GetSentLocalResponse(id)
		require.NotNil(t, resp)
		require.EqualValues(t, 429, resp.StatusCode)
	}
	tick := func(at time.Duration) { *d.now = t0.Add(at); d.host.Tick() }
	tick(99 * ms)
	require.Equal(t, types.ActionPause, d.host.GetCurrentHttpStreamAction(ids[1]))
	tick(100 * ms)
	require.Equal(t, types.ActionContinue, d.host.GetCurrentHttpStreamAction(ids[1]))
	require.Equal(t, types.ActionPause, d.host.GetCurrentHttpStreamAction(ids[2]))
	// A client that gives up while queued is dropped, never resumed.
	d.host.CompleteHttpContext(ids[2])
	tick(300 * ms)
	released, _ := d.host.GetCounterMetric("ratelimit_shape_released_total;rule=shape")
	dropped, _ := d.host.GetCounterMetric("ratelimit_shape_dropped_total;rule=shape")
	queued, _ := d.host.GetCounterMetric("ratelimit_shape_queued_total;rule=shape")
	require.EqualValues(t, 2, queued)
	require.EqualValues(t, 1, released)
	require.EqualValues(t, 1, dropped)
}

func TestAdaptiveLimitFallsAndRecovers(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"ad","algorithm":"adaptive","window":"1s",
		"adaptive":{"min_limit":5,"max_limit":100,"target_latency":"100ms","interval":"1s"}}]}`)
	limit := func() uint64 {
		v, err := d.host.GetGaugeMetric("ratelimit_adaptive_limit;rule=ad")
		require.NoError(t, err)
		return v
	}
	require.EqualValues(t, 100, limit())
	at := time.Duration(0)
	serve := func(status string, latency time.Duration) {
		*d.now = t0.Add(at)
		id := d.host.InitializeHttpContext()
		d.host.CallOnRequestHeaders(id, step{}.RequestHeaders(), true)
		*d.now = t0.Add(at + latency)
		d.host.CallOnResponseHeaders(id, [][2]string{{":status", status}}, true)
		d.host.CompleteHttpContext(id)
	}
	interval := func(status string, latency time.Duration) {
		for range 20 {
			serve(status, latency)
		}
		at += time.Second
		*d.now = t0.Add(at)
		d.host.Tick()
	}
	// The first tick only starts the controller's interval.
	interval("200", time.Millisecond)
	prev := limit()
	for range 5 {
		interval("503", time.Millisecond)
		require.Less(t, limit(), prev, "errors must shrink the limit")
		prev = limit()
	}
	for range 3 {
		interval("200", 500*time.Millisecond)
		require.LessOrEqual(t, limit(), prev, "slow responses must not grow the limit")
		prev = limit()
	}
	for range 30 {
		interval("200", time.Millisecond)
		require.GreaterOrEqual(t, limit(), prev)
		prev = limit()
	}
	require.EqualValues(t, 100, limit(), "a healthy upstream gets its full limit back")
}

// A min_limit below what the controller can hold is accepted but named in a warning.
func TestAdaptiveFloorWarning(t *testing.T) {
	// Each emulator holds the SDK's global lock until its cleanup, hence one per subtest.
	t.Run("below the floor", func(t *testing.T) {
		d := newNative(t, `{"rules":[{"name":"ad","algorithm":"adaptive","window":"1s",
			"adaptive":{"min_limit":5,"max_limit":100,"target_latency":"100ms","interval":"200ms"}}]}`)
		warnings := d.host.GetWarnLogs()
		require.Len(t, warnings, 1)
		require.Contains(t, warnings[0], `rule "ad": adaptive min_limit 5 is below 50`)
	})
	t.Run("above the floor", func(t *testing.T) {
		d := newNative(t, `{"rules":[{"name":"ad","algorithm":"adaptive","window":"1s",
			"adaptive":{"min_limit":10,"max_limit":100,"target_latency":"100ms","interval":"1s"}}]}`)
		require.Empty(t, d.host.GetWarnLogs())
	})
}
