package filter

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Calls that Redis answers after the client reset the stream, natively against a real
// redis-server and webdis on the fake clock of newGlobalFleet: with redis.partitions 1 (the
// request's one call, lateAnswer) and 4 (one call per rule, lateShardAnswer). A lease batch
// such a call commits is held; every such answer is measured and heard by the breaker.

// resetMidCall starts a request with headers on worker VM w and resets its stream while its
// callouts are out (startReset), then has webdis at url answer every callout and deletes the
// stream's context. It returns the number of callouts.
func (l *leaseVMs) resetMidCall(t *testing.T, w int, url string, headers ...[2]string) int {
	t.Helper()
	id, calls := l.startReset(t, w, headers...)
	for _, c := range calls {
		l.answerAt(t, url, c)
	}
	require.Nil(t, l.host.GetSentLocalResponse(id), "nothing is sent on a gone stream")
	l.host.CompleteHttpContext(id)
	return len(calls)
}

// startReset starts a request with headers on worker VM w and resets its stream while its
// callouts are out: the filter's OnHttpStreamDone runs before any answer is delivered, as
// Envoy's proxy_on_log does for a stream the client reset. It returns the stream and its
// callouts, which the caller answers and then deletes the stream (CompleteHttpContext): the
// SDK's emulator drops the answer of a deleted stream, so the context is deleted only after
// the answers; on a Wasm host abi.DispatchHttpCallAlways delivers them on the root context
// instead (wasmhost/moduletest tests that).
func (l *leaseVMs) startReset(t *testing.T, w int, headers ...[2]string) (uint32, []proxytest.HttpCalloutAttribute) {
	t.Helper()
	l.cur = w
	// NewHttpContext reuses the VM's last free context: offering it this one gives the test
	// the stream's context, whose OnHttpStreamDone the emulator calls only with the deletion.
	h := &httpContext{}
	l.vms[w].contexts = append(l.vms[w].contexts, h)
	id := l.host.InitializeHttpContext()
	action := l.host.CallOnRequestHeaders(id, append([][2]string{{":method", "GET"}, {":path", "/"}}, headers...), true)
	require.Equal(t, types.ActionPause, action, "the request waits for Redis")
	require.Equal(t, id, h.id, "the stream got the offered context")
	calls := l.host.GetCalloutAttributesFromContext(id)
	require.NotEmpty(t, calls)
	h.OnHttpStreamDone()
	require.True(t, h.done)
	return id, calls
}

// leasedY is a global rule x (exact, limit xLimit per x-k) and a leased global rule y (1000
// an hour per x-y, batches of 10) in partitions partitions; maxKeys bounds y's keys (0: no
// bound).
func leasedY(partitions, xLimit, maxKeys int) string {
	bound := ""
	if maxKeys > 0 {
		bound = fmt.Sprintf(`"max_keys":%d,`, maxKeys)
	}
	rules := fmt.Sprintf(`[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":%d,"window":"1h"},`, xLimit) +
		`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h",` + bound + `"lease":{"batch":10,"ttl":"1m"}}]`
	return filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: partitions}, rules)
}

// yTokens returns the tokens Redis holds for y's key k, in the token bucket's nanoseconds of
// refill (3.6 s a token at 1000 an hour), or -1 when the key does not exist.
func yTokens(t *testing.T, srv *redistest.Server, k string) int64 {
	t.Helper()
	// Partitioned keys first (rl:{rl:y:<p>}:...), then the domain's one slot (rl:{rl}:y:...).
	keys := srv.MustDo("KEYS", "rl:{rl:y:*}:*:"+k).([]any)
	if len(keys) == 0 {
		keys = srv.MustDo("KEYS", "rl:{rl}:y:*:"+k).([]any)
	}
	if len(keys) == 0 {
		return -1
	}
	require.Len(t, keys, 1)
	var n int64
	_, err := fmt.Sscan(fmt.Sprint(srv.MustDo("HGET", fmt.Sprint(keys[0]), "t")), &n)
	require.NoError(t, err)
	return n
}

// yKey is how y's lease map names the key of x-y: late (the descriptor: each key part's length
// and value).
const yKey = "4:late"

// tokens is n tokens of y in the token bucket's unit.
func tokens(n int64) int64 { return n * int64(3600*time.Millisecond) }

// TestLateBatchIsHeld: a request's call asks Redis for y's lease batch and the client resets
// the stream before the answer arrives. Redis commits the call (x admits, y's batch of 10
// fits), so the ten units are debited: the VM holds them as its lease on the key, the reset
// request's own unit included (it spent none), and the key's next ten requests are admitted
// for y with no unit asked of Redis. With partitions 1 this is lateAnswer (the request's one
// call, all or nothing): the batch is debited, so it must be spent or counted. With
// partitions 4, lateShardAnswer, the same.
func TestLateBatchIsHeld(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 0), 1, 1)
			url := srv.WebdisURL()
			calls := l.resetMidCall(t, 0, url, hdr("x-k", "A"), hdr("x-y", "late"))
			require.Equal(t, min(parts, 2), calls, "one call, or one per rule")
			require.Equal(t, tokens(990), yTokens(t, srv, "late"), "Redis debited y's batch of 10")
			y := l.vms[0].rules[1]
			require.Equal(t, "y", y.rule.Name)
			held := y.lease.held[yKey]
			require.NotNil(t, held, "the committed batch is this VM's lease")
			require.EqualValues(t, 10, held.units, "all of it: the reset request spent none")
			require.Equal(t, t0.UnixNano()+int64(time.Minute), held.expires, "ttl from the call's send")
			taken, err := l.host.GetCounterMetric(statName("ratelimit_lease_taken_total", "y"))
			require.NoError(t, err)
			require.EqualValues(t, 1, taken)

			for i := range 10 {
				l.now += int64(time.Millisecond)
				ok, _ := l.doRelayed(t, 0, url, hdr("x-k", fmt.Sprint("B", i)), hdr("x-y", "late"))
				require.True(t, ok)
				require.Equal(t, tokens(990), yTokens(t, srv, "late"), "request %d spends the held batch", i)
			}
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "C"), hdr("x-y", "late"))
			require.True(t, ok)
			require.Less(t, yTokens(t, srv, "late"), tokens(981), "the batch is spent: y takes another")
			dropped, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
			require.NoError(t, err)
			require.Zero(t, dropped)
		})
	}
}

// TestLateBatchUncommittedIsNotHeld: with partitions 1 a reset request's call in which x
// denies commits nothing (all or nothing), y's batch included: the VM holds no lease, and the
// key's next request asks Redis for y again.
func TestLateBatchUncommittedIsNotHeld(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	l := newGlobalFleet(t, leasedY(1, 1, 0), 1, 1)
	url := srv.WebdisURL()
	ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "A"), hdr("x-y", "first"))
	require.True(t, ok, "A's one request")
	l.resetMidCall(t, 0, url, hdr("x-k", "A"), hdr("x-y", "late"))
	require.EqualValues(t, -1, yTokens(t, srv, "late"), "x denied: Redis wrote nothing for y")
	y := l.vms[0].rules[1]
	require.Nil(t, y.lease.held[yKey], "no lease for a batch Redis did not commit")
	ok, _ = l.doRelayed(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
	require.True(t, ok)
	require.Equal(t, tokens(990), yTokens(t, srv, "late"), "y asks Redis for its first batch")
	taken, err := l.host.GetCounterMetric(statName("ratelimit_lease_taken_total", "y"))
	require.NoError(t, err)
	require.EqualValues(t, 2, taken, "first's batch and B's; none for the reset request")
	dropped, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
	require.NoError(t, err)
	require.Zero(t, dropped, "nothing was debited, so nothing is dropped")
}

// TestLateBatchOnOverflowIsDropped: a reset request's batch (as in TestLateBatchIsHeld) that
// lands on y's overflow key, y's key bound being reached, is decided there for the request's
// own cost alone (no lease on the overflow key) and gives the VM no lease; the reset request's
// unit, which nobody spent, is counted in lease_units_dropped, as the partitioned path counts
// it (TestPartitionedLateBatchOnOverflowIsDropped).
func TestLateBatchOnOverflowIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 4), 1, 1)
			url := srv.WebdisURL()
			// max_keys 4: one live key per partition with 4, four in all with 1; twenty keys
			// fill every partition.
			for i := range 20 {
				ok, _ := l.doRelayed(t, 0, url, hdr("x-k", fmt.Sprint("fill", i)), hdr("x-y", fmt.Sprint("fill", i)))
				require.True(t, ok)
			}
			counter := func(metric string) uint64 {
				n, _ := l.host.GetCounterMetric(statName(metric, "y"))
				return n
			}
			overflowed, before := counter("ratelimit_key_overflow_total"), counter("ratelimit_lease_units_dropped_total")
			require.Positive(t, overflowed, "the fills overflowed")

			l.resetMidCall(t, 0, url, hdr("x-k", "A"), hdr("x-y", "late"))
			require.Equal(t, overflowed, counter("ratelimit_key_overflow_total"), "a late answer is not counted as the rule's decision")
			require.EqualValues(t, 1, counter("ratelimit_lease_units_dropped_total")-before, "the overflow key debited the request's own unit only")
			require.Nil(t, l.vms[0].rules[1].lease.held[yKey], "no lease on an overflow key")
		})
	}
}

// TestLateAnswerIsMeasured: the answer to a reset request's call, 7 ms after its send, is a
// round trip of Redis like any other and is recorded in ratelimit_redis_latency_us: leaving
// out the slow answers clients gave up on would flatter the histogram.
func TestLateAnswerIsMeasured(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts},
				`[{"name":"g","scope":"global","algorithm":"token_bucket","limit":10,"window":"1m"}]`), 1, 1)
			id, calls := l.startReset(t, 0)
			require.Len(t, calls, 1)
			l.now += int64(7 * time.Millisecond)
			l.answerAt(t, srv.WebdisURL(), calls[0])
			l.host.CompleteHttpContext(id)
			us, err := l.host.GetHistogramMetric("ratelimit_redis_latency_us")
			require.NoError(t, err)
			require.EqualValues(t, 7000, us)
		})
	}
}

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

// TestLateBatchAfterTTLIsDropped: a reset request's call for y's lease batch (ttl 100 ms,
// redis.timeout 2 s) is answered only after the batch's ttl, counted from the call's send,
// has passed; meanwhile a later request took and holds a fresh batch on the same key. The
// late batch cannot be spent any more (a lease's units expire ttl after the call's send), so
// all ten units are counted as dropped at once, and the fresh lease is left alone: its nine
// units still admit the key's next requests with no call. Holding the expired batch instead
// would replace the live lease (dropping its nine units) with one that is already expired (its
// ten dropped at the next request), and the key's next request would take a third batch.
func TestLateBatchAfterTTLIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			l, url, y, dropped := newLateBatchFleet(t, srv, parts)

			id, calls := l.startReset(t, 0, hdr("x-k", "A"), hdr("x-y", "late"))
			l.now += int64(50 * time.Millisecond)
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
			require.True(t, ok)
			fresh := y.lease.held[yKey]
			require.NotNil(t, fresh)
			require.EqualValues(t, 9, fresh.units, "the later request's batch, its own unit spent")

			l.now += int64(60 * time.Millisecond) // 110 ms after the reset request's call
			for _, c := range calls {
				l.answerAt(t, url, c)
			}
			l.host.CompleteHttpContext(id)
			require.Same(t, fresh, y.lease.held[yKey], "the live lease is kept")
			require.EqualValues(t, 9, fresh.units)
			require.EqualValues(t, 10, dropped(), "the expired late batch is dropped, all of it, at once")

			requireNextSpendsLiveLease(t, l, srv, fresh)
			require.EqualValues(t, 10, dropped(), "nothing more is dropped")
		})
	}
}

// TestSlowBatchAfterTTLIsDropped is TestLateBatchAfterTTLIsDropped for a request that still
// waits: its call for y's batch is answered after the batch's ttl has passed, while a later
// request holds a fresh batch on the key. The request is admitted (it spends its own unit of
// the batch, which Redis committed), and the other nine units, already expired, are dropped at
// once; the live lease is kept and admits the key's next request with no call.
func TestSlowBatchAfterTTLIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			l, url, y, dropped := newLateBatchFleet(t, srv, parts)

			l.cur = 0
			id := l.host.InitializeHttpContext()
			action := l.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, hdr("x-k", "A"), hdr("x-y", "late")}, true)
			require.Equal(t, types.ActionPause, action)
			calls := l.host.GetCalloutAttributesFromContext(id)
			l.now += int64(50 * time.Millisecond)
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
			require.True(t, ok)
			fresh := y.lease.held[yKey]
			require.NotNil(t, fresh)
			require.EqualValues(t, 9, fresh.units)

			l.now += int64(60 * time.Millisecond) // 110 ms after the slow request's call
			for _, c := range calls {
				l.answerAt(t, url, c)
			}
			require.Equal(t, types.ActionContinue, l.host.GetCurrentHttpStreamAction(id), "the slow request is admitted")
			l.host.CompleteHttpContext(id)
			require.Same(t, fresh, y.lease.held[yKey], "the live lease is kept")
			require.EqualValues(t, 9, fresh.units)
			require.EqualValues(t, 9, dropped(), "the expired batch's nine other units are dropped at once")

			requireNextSpendsLiveLease(t, l, srv, fresh)
			require.EqualValues(t, 9, dropped(), "nothing more is dropped")
		})
	}
}

// lateBatchRules are the two global rules of the late-batch tests: x, which every request
// passes (continue), and y, whose key "late" takes lease batches of ten units that expire 100
// ms after their call is sent.
const lateBatchRules = `[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":1000,"window":"1h"},` +
	`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h","lease":{"batch":10,"ttl":"100ms"}}]`

// newLateBatchFleet starts one VM on lateBatchRules against srv with parts partitions, and
// returns it with webdis's URL, rule y and a reader of y's dropped-units counter.
func newLateBatchFleet(t *testing.T, srv *redistest.Server, parts int) (*leaseVMs, string, *ruleState, func() uint64) {
	t.Helper()
	loadScripts(srv)
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts}, lateBatchRules), 1, 1)
	y := l.vms[0].rules[1]
	require.Equal(t, "y", y.rule.Name)
	dropped := func() uint64 {
		n, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
		require.NoError(t, err)
		return n
	}
	return l, srv.WebdisURL(), y, dropped
}

// requireNextSpendsLiveLease checks the closing promise of the late-batch tests: after the
// late answer, the key's next request is admitted from the live lease fresh with no call to
// Redis (y's stored tokens do not move), and the lease has one unit less.
func requireNextSpendsLiveLease(t *testing.T, l *leaseVMs, srv *redistest.Server, fresh *heldLease) {
	t.Helper()
	before := yTokens(t, srv, "late")
	units := fresh.units
	l.now += int64(time.Millisecond)
	ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "C"), hdr("x-y", "late"))
	require.True(t, ok)
	require.Equal(t, before, yTokens(t, srv, "late"), "the next request spends the live lease")
	require.EqualValues(t, units-1, fresh.units)
}
