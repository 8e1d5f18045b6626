package filter

import (
	"strconv"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/stretchr/testify/require"
)

// nativeRedisWorker is one worker VM's Redis client under the emulator: its own breaker, and
// the process-wide metrics every worker shares (defining a metric again yields the same one).
func nativeRedisWorker(t *testing.T, failures int) *httpContext {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"redis":{"cluster":"webdis","breaker":{"failures":` +
		strconv.Itoa(failures) + `,"cooldown":"10s"}},"rules":[{"name":"g","scope":"global","algorithm":"gcra","limit":5,"window":"1m"}]}`))
	require.NoError(t, err)
	c, err := newRedisClient(cfg.Redis)
	require.NoError(t, err)
	return &httpContext{plugin: &plugin{cfg: cfg, redis: c}}
}

func gaugeNative(t *testing.T, d *nativeDriver, name string) int64 {
	t.Helper()
	v, err := d.host.GetGaugeMetric(name)
	require.NoError(t, err)
	return int64(v)
}

func counterNative(d *nativeDriver, name string) uint64 {
	v, _ := d.host.GetCounterMetric(name)
	return v
}

// Issue 11 item 7: ratelimit_redis_breaker_open counts the worker VMs whose breaker is open.
// Recording 1 and 0 per worker made it say whatever the last worker said: with two workers
// open and one closing again it read 0.
func TestBreakerGaugeCountsOpenWorkersNative(t *testing.T) {
	d := newNativeGlobal(t, "allow")
	w1, w2 := nativeRedisWorker(t, 1), nativeRedisWorker(t, 1)
	const open = "ratelimit_redis_breaker_open"
	require.Zero(t, gaugeNative(t, d, open))
	w1.noteFailure(t0.UnixNano(), errCalloutReset)
	require.EqualValues(t, 1, gaugeNative(t, d, open))
	w2.noteFailure(t0.UnixNano(), errCalloutReset)
	require.EqualValues(t, 2, gaugeNative(t, d, open), "both workers are open")
	// A failed probe opens w1 again: it is still one worker.
	w1.noteFailure(t0.UnixNano(), errCalloutReset)
	require.EqualValues(t, 2, gaugeNative(t, d, open))
	require.EqualValues(t, 2, counterNative(d, "ratelimit_redis_breaker_opened_total"))
	// w1 closes; w2 is still open, and the gauge says so.
	require.True(t, w1.plugin.redis.breaker.success())
	w1.plugin.redis.gauge.set(false)
	require.EqualValues(t, 1, gaugeNative(t, d, open))
	// w2's VM goes away with its breaker open: its share leaves with it.
	require.True(t, w2.plugin.OnPluginDone())
	require.Zero(t, gaugeNative(t, d, open))
}

// Issue 11 item 8: a callout that Envoy refuses at once with InternalFailure (the cluster has
// no host) is an unavailable Redis, and feeds the breaker; it used to be counted as a reset.
func TestCalloutWithoutHostsIsUnavailableNative(t *testing.T) {
	d := newNativeGlobal(t, "allow")
	w := nativeRedisWorker(t, 2)
	for range 2 {
		w.noteFailure(t0.UnixNano(), sendError(abi.ErrInternalFailure))
	}
	require.EqualValues(t, 2, counterNative(d, "ratelimit_redis_unavailable_total"))
	require.Zero(t, counterNative(d, "ratelimit_redis_resets_total"))
	require.EqualValues(t, 1, gaugeNative(t, d, "ratelimit_redis_breaker_open"), "two failures open the breaker")
	// Any other refusal (a cluster Envoy does not know) stays a reset.
	w.noteFailure(t0.UnixNano(), sendError(abi.ErrBadArgument))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_redis_resets_total"))
}
