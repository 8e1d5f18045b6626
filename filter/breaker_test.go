package filter

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
)

// TestLateAnswerFeedsBreaker: the breaker hears the answers of reset requests' calls. Two
// late 503s (webdis: Redis unavailable) open it (threshold 2), counted as unavailable, and
// the next request skips Redis; after the cooldown a probe request is reset too, and its late
// success closes the breaker, so the request after it goes to Redis again. Otherwise a
// breaker whose clients give up before Redis answers would never open, and a probe whose
// client gave up would keep the breaker shut until the probe counted as lost.
func TestLateAnswerFeedsBreaker(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts, Failures: 2,
				Cooldown: "10s", FailureMode: "allow"},
				`[{"name":"g","scope":"global","algorithm":"token_bucket","limit":100,"window":"1m"}]`), 1, 1)
			metric := func(name string) uint64 {
				n, _ := l.host.GetCounterMetric(name)
				return n
			}
			open := func() uint64 {
				n, _ := l.host.GetGaugeMetric("ratelimit_redis_breaker_open")
				return n
			}
			for range 2 {
				id, calls := l.startReset(t, 0)
				require.Len(t, calls, 1)
				l.host.CallOnHttpCallResponse(calls[0].CalloutID, [][2]string{{":status", "503"}}, nil, nil)
				l.host.CompleteHttpContext(id)
			}
			require.EqualValues(t, 2, metric("ratelimit_redis_unavailable_total"), "late failures are counted")
			require.EqualValues(t, 1, open(), "and open the breaker")
			ok, calls := l.doRelayed(t, 0, srv.WebdisURL())
			require.True(t, ok, "failure_mode allow")
			require.Zero(t, calls, "the open breaker skips Redis")
			require.EqualValues(t, 1, metric("ratelimit_redis_skipped_total"))

			l.now += int64(10 * time.Second)
			l.resetMidCall(t, 0, srv.WebdisURL()) // the probe, answered after its client left
			require.Zero(t, open(), "the late success closes the breaker")
			ok, calls = l.doRelayed(t, 0, srv.WebdisURL())
			require.True(t, ok)
			require.Equal(t, 1, calls, "Redis is used again")
			require.EqualValues(t, 1, metric("ratelimit_redis_skipped_total"))
		})
	}
}

// TestBreakerLostProbeIsReplaced: a host may still lose a gone stream's answer (the SDK's
// emulator drops it with the deleted stream). A probe whose answer never comes holds the
// breaker open only until it has been out for max(cooldown, the callout timeout); the next
// request then probes again, and its success closes the breaker.
func TestBreakerLostProbeIsReplaced(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Timeout: "2s", Failures: 1,
		Cooldown: "10s", FailureMode: "allow"},
		`[{"name":"g","scope":"global","algorithm":"token_bucket","limit":100,"window":"1m"}]`), 1, 1)
	open := func() uint64 {
		n, _ := l.host.GetGaugeMetric("ratelimit_redis_breaker_open")
		return n
	}
	start := func() (uint32, []proxytest.HttpCalloutAttribute) {
		id := l.host.InitializeHttpContext()
		l.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}}, true)
		return id, l.host.GetCalloutAttributesFromContext(id)
	}
	id, calls := start()
	require.Len(t, calls, 1)
	l.host.CallOnHttpCallResponse(calls[0].CalloutID, [][2]string{{":status", "503"}}, nil, nil)
	l.host.CompleteHttpContext(id)
	require.EqualValues(t, 1, open(), "one failure opens the breaker")

	l.now += int64(10 * time.Second)
	id, calls = start()
	require.Len(t, calls, 1, "the probe")
	l.host.CompleteHttpContext(id) // its answer is lost with the stream
	l.now += int64(9 * time.Second)
	ok, n := l.doRelayed(t, 0, srv.WebdisURL())
	require.True(t, ok)
	require.Zero(t, n, "the probe is still out: Redis is skipped")
	l.now += int64(time.Second)
	ok, n = l.doRelayed(t, 0, srv.WebdisURL())
	require.True(t, ok)
	require.Equal(t, 1, n, "the probe counts as lost: a new one is sent")
	require.Zero(t, open(), "and its success closes the breaker")
}

// TestLateAnswersFeedTheirPartitionsBreaker: with redis.partitions 4 a reset request's two
// rules are called in two partitions; rule a's call fails late (503) and rule b's succeeds
// late. Each answer reaches the breaker of its own call's partition: a's partition opens
// (threshold 1) and b's stays closed, so the next request skips Redis for a only, and b's
// call is sent as before. An answer fed to another partition's breaker, or to the one
// breaker of an unpartitioned client, would open b's partition too or none.
func TestLateAnswersFeedTheirPartitionsBreaker(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	rules := `[{"name":"a","scope":"global","continue":true,"key":[{"source":"header","name":"x-a"}],"algorithm":"token_bucket","limit":100,"window":"1m"},` +
		`{"name":"b","scope":"global","key":[{"source":"header","name":"x-b"}],"algorithm":"token_bucket","limit":100,"window":"1m"}]`
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4, Failures: 1, Cooldown: "10s",
		FailureMode: "allow"}, rules), 1, 1)
	secret := fleetSecret
	// Keys of a and b in different partitions: a's descriptor is "1:A" (x-a: A).
	pa := redis.Partition(&secret, []byte("1:A"), 4)
	kb := ""
	for i := range 100 {
		if k := fmt.Sprint(i); redis.Partition(&secret, []byte(fmt.Sprintf("%d:%s", len(k), k)), 4) != pa {
			kb = k
			break
		}
	}
	require.NotEmpty(t, kb)
	metric := func(name string) uint64 {
		n, _ := l.host.GetCounterMetric(name)
		return n
	}
	open := func() uint64 {
		n, _ := l.host.GetGaugeMetric("ratelimit_redis_breaker_open")
		return n
	}
	headers := [][2]string{hdr("x-a", "A"), hdr("x-b", kb)}
	id, calls := l.startReset(t, 0, headers...)
	require.Len(t, calls, 2)
	for _, c := range calls {
		if bytes.Contains(c.Body, []byte("%7Brl%3Aa%3A")) {
			l.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "503"}}, nil, nil)
		} else {
			l.answerAt(t, srv.WebdisURL(), c)
		}
	}
	l.host.CompleteHttpContext(id)
	require.EqualValues(t, 1, metric("ratelimit_redis_unavailable_total"), "a's late failure is counted once")
	require.EqualValues(t, 1, open(), "and opens a breaker")
	c := l.vms[0].redis
	for p := range c.parts {
		require.Equal(t, p == pa, c.parts[p].openUntil != 0, "partition %d (a's: %d)", p, pa)
	}

	l.now += int64(time.Millisecond)
	ok, n := l.doRelayed(t, 0, srv.WebdisURL(), headers...)
	require.True(t, ok, "failure_mode allow")
	require.Equal(t, 1, n, "b's call only: a's partition is open")
	require.EqualValues(t, 1, metric("ratelimit_redis_skipped_total"))
}

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

// ratelimit_redis_breaker_open counts the worker VMs whose breaker is open. Recording 1 and 0
// per worker would make it say whatever the last worker said: with two workers open and one
// closing again it would read 0.
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
