package moduletest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// TestGlobalWasmLateFailuresOpenBreaker: the compiled module, one worker, breaker threshold 2.
// Redis is down and two requests' calls are held back by the relay; both clients reset their
// streams, the host tears the streams down, and only then does webdis answer each call 503.
// The VM hears both failures (every Redis call is sent with abi.DispatchHttpCallAlways, and
// the filter records a gone stream's answer, lateOutcome): they are counted as unavailable
// and open the breaker, so the next request skips Redis at once. Dropped with their streams,
// the answers of clients that give up before Redis answers would never open the breaker, and
// every request would keep waiting for Redis. Package filter tests the same natively,
// and that a late success closes the breaker (TestLateAnswerFeedsBreaker).
func TestGlobalWasmLateFailuresOpenBreaker(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "EVAL")
	rules := "[" + globalRule("g", `"algorithm":"token_bucket","limit":1000,"window":"1h"`, false) + "]"
	h := newGlobalHost(t, globalConfig(redisOpts{FailureMode: "allow", Failures: 2, Cooldown: "10m"}, rules), front.URL, 1)
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }
	unavailable := func() int64 { return redisMetric(h, "ratelimit_redis_unavailable_total") }

	srv.StopRedis()
	relay.hold.Store(true)
	for i := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := h.Do(ctx, globalRequest())
			done <- err
		}()
		eventually(t, "the request's call is out", func() bool { return calls() == int64(i+1) })
		cancel()
		require.ErrorIs(t, <-done, context.Canceled, "the client reset the stream")
	}
	require.Zero(t, unavailable(), "no answer has arrived")
	close(relay.release)
	eventually(t, "both late failures are heard", func() bool { return unavailable() == 2 })
	require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_breaker_open"), "and open the breaker")

	o, _ := doTimed(t, h)
	require.Zero(t, o.Status, "failure_mode allow")
	require.EqualValues(t, 2, calls(), "the open breaker skips Redis")
	require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_skipped_total"))
	require.Zero(t, h.Stats().Traps)
	requireCleanLogs(t, h)
}

// TestGlobalWasmLateBatchAfterTTLIsDropped: the compiled module on the virtual clock, one
// worker, redis.partitions 1, rule y leased with ttl 100 ms (redis.timeout 2 s). A request's
// call for y's batch is held back; 50 ms later another request takes and holds a batch on the
// same key; at 110 ms the first client resets its stream and only then does its answer
// arrive, after the batch's ttl (counted from the call's send). The late batch is counted as
// dropped at once, all ten units, and the live lease is kept: the key's next request spends
// it, with no new take. Holding the expired batch instead would replace the live lease (its
// nine units dropped) and the next request would drop the expired ten and take a third batch.
// Package filter tests the same natively (TestLateBatchAfterTTLIsDropped).
func TestGlobalWasmLateBatchAfterTTLIsDropped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "%3Alate/")
	rules := xyLeaseRules(`"lease":{"batch":10,"ttl":"100ms"}`)
	h, clock := virtualHost(t, globalConfig(redisOpts{}, rules), 1, map[string]string{"webdis": front.URL})
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	dropped := func() int64 { return redisMetric(h, "ratelimit_lease_units_dropped_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	// The first request loads the script (NOSCRIPT, then the script in full).
	o, _ := doTimed(t, h, hdr("x-k", "W"), hdr("x-y", "warm"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 1, taken())

	reset := holdAndReset(t, h, relay, calls, hdr("x-k", "A"), hdr("x-y", "late"))
	relay.hold.Store(false)

	clock.Advance(50 * time.Millisecond)
	o, _ = doTimed(t, h, hdr("x-k", "B"), hdr("x-y", "late"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 2, taken(), "the later request takes and holds a batch")

	clock.Advance(60 * time.Millisecond)
	reset()
	close(relay.release)
	eventually(t, "the expired late batch is dropped, all of it", func() bool { return dropped() == 10 })

	before := calls()
	o, _ = doTimed(t, h, hdr("x-k", "C"), hdr("x-y", "late"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 2, taken(), "the live lease admits the key's next request: no new take")
	require.EqualValues(t, 10, dropped())
	require.EqualValues(t, 1, calls()-before, "one call, for x only")
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}

// TestGlobalWasmLateAnswerGivesBack: the compiled module on the virtual clock, one worker,
// redis.partitions 1, rule y leased (batch 10, ttl 100 ms). A request takes y's batch and
// spends one unit; after the ttl, the key's next request carries the nine unspent units back
// in its call, and its client resets the stream before the answer arrives. The script applied
// the give-back all the same, so the late answer counts the nine units as returned: a
// dashboard that summed taken, spent, returned and dropped would otherwise lose them. Package
// filter tests the partitioned path (TestPartitionedLateAnswerGivesBack).
func TestGlobalWasmLateAnswerGivesBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "%3Alate/")
	rules := xyLeaseRules(`"lease":{"batch":10,"ttl":"100ms"}`)
	h, clock := virtualHost(t, globalConfig(redisOpts{}, rules), 1, map[string]string{"webdis": front.URL})
	returned := func() int64 { return redisMetric(h, "ratelimit_lease_units_returned_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	o, _ := doTimed(t, h, hdr("x-k", "W"), hdr("x-y", "late"))
	require.Zero(t, o.Status)
	clock.Advance(200 * time.Millisecond)
	reset := holdAndReset(t, h, relay, calls, hdr("x-k", "A"), hdr("x-y", "late"))
	reset()
	require.Zero(t, returned(), "the call's answer has not arrived")
	close(relay.release)
	eventually(t, "the late answer counts the give-back its call carried", func() bool { return returned() == 9 })
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}

// TestGlobalWasmLateBatchOnOverflowIsDropped: the compiled module with redis.partitions 1, one
// worker. Rule y (lease batch 10, max_keys 4) has its four keys live, so a new key is decided
// on the rule's overflow key in Redis. A request for a new key asks for y's batch, the client
// resets the stream, and only then does Redis's answer arrive: the call committed, but on the
// overflow key the script decides the request's own cost, never a batch, so the one unit the
// gone request did not spend is counted in lease_units_dropped and no lease is taken. Package
// filter tests the same natively (TestLateBatchOnOverflowIsDropped).
func TestGlobalWasmLateBatchOnOverflowIsDropped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "%3Alate/")
	rules := xyLeaseRules(`"max_keys":4,"lease":{"batch":10,"ttl":"1m"}`)
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), front.URL, 1)
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	dropped := func() int64 { return redisMetric(h, "ratelimit_lease_units_dropped_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	for i := range 4 {
		o, _ := doTimed(t, h, hdr("x-k", fmt.Sprint("fill", i)), hdr("x-y", fmt.Sprint("fill", i)))
		require.Zero(t, o.Status)
	}
	takenBefore, droppedBefore := taken(), dropped()

	reset := holdAndReset(t, h, relay, calls, hdr("x-k", "A"), hdr("x-y", "late"))
	reset()
	require.Equal(t, droppedBefore, dropped(), "the call's answer has not arrived")
	close(relay.release)
	eventually(t, "the request's own unit on the overflow key is dropped", func() bool { return dropped() == droppedBefore+1 })
	require.Equal(t, takenBefore, taken(), "and no lease is taken")
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}

// heldBack is a relay in front of webdis that holds back the calls whose body contains tag
// while hold is set, until release is closed: the test decides that one rule's answer arrives
// after the request has ended. Every call still reaches the real webdis. held counts the calls
// it has held back.
type heldBack struct {
	webdis  string
	tag     string
	hold    atomic.Bool
	held    atomic.Int64
	release chan struct{}
}

func (r *heldBack) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if r.hold.Load() && bytes.Contains(body, []byte(r.tag)) {
		r.held.Add(1)
		<-r.release
	}
	status, answer, err := redistest.Post(r.webdis, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// startHeldBack starts a heldBack relay in front of webdis, for the test's life; a call still
// held back when the test ends is let go.
func startHeldBack(t *testing.T, webdis, tag string) (*heldBack, *httptest.Server) {
	relay := &heldBack{webdis: webdis, tag: tag, release: make(chan struct{})}
	front := httptest.NewServer(relay)
	t.Cleanup(front.Close)
	t.Cleanup(func() {
		select {
		case <-relay.release:
		default:
			close(relay.release)
		}
	})
	return relay, front
}

// xyLeaseRules is the two global rules of the late-answer tests: x (limit 1000, continue) and
// y, a token bucket of 1000 per hour with yOpts (its lease, max_keys) added.
func xyLeaseRules(yOpts string) string {
	return `[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":1000,"window":"1h"},` +
		`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h",` + yOpts + `}]`
}

// holdAndReset sends a request with headers while relay holds its Redis call back, and waits
// until the call is out (calls counts the module's Redis calls) and the relay holds it, so
// that the test may clear relay.hold at once. The returned reset is the client resetting the
// stream: it returns once the host has torn the stream down. The held call is answered when
// the test closes relay.release.
func holdAndReset(t *testing.T, h *wasmhost.Host, relay *heldBack, calls func() int64, headers ...[2]string) (reset func()) {
	t.Helper()
	relay.hold.Store(true)
	before, heldBefore := calls(), relay.held.Load()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		_, err := h.Do(ctx, globalRequest(headers...))
		done <- err
	}()
	eventually(t, "the request's call is out", func() bool { return calls() == before+1 })
	eventually(t, "the relay holds the call", func() bool { return relay.held.Load() == heldBefore+1 })
	return func() {
		t.Helper()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled, "the client reset the stream")
	}
}

// TestGlobalWasmPartitionedLateBatchIsHeld: the compiled module with partitions, one worker.
// Rule x denies a request while rule y's call for a lease batch is held back; the request is
// answered and its stream torn down, and only then does y's answer arrive. Redis committed the
// batch, and the VM holds it as its lease on the key (Envoy does not cancel a torn-down
// stream's callout, and the filter takes that answer on the root context,
// abi.DispatchHttpCallAlways): the key's next ten requests cost no call for y. Package filter
// tests the same natively (TestPartitionedLateBatchIsHeld).
func TestGlobalWasmPartitionedLateBatchIsHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "%7Brl%3Ay%3A")
	rules := `[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":1,"window":"1h"},` +
		`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h","lease":{"batch":10,"ttl":"1m"}}]`
	h := newGlobalHost(t, globalConfig(redisOpts{Partitions: 4}, rules), front.URL, 1)
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	o, _ := doTimed(t, h, hdr("x-k", "A"), hdr("x-y", "first"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 1, taken())

	relay.hold.Store(true)
	o, _ = doTimed(t, h, hdr("x-k", "A"), hdr("x-y", "late"))
	require.Equal(t, 429, o.Status, "x denies while y's call is held back")
	require.Contains(t, o.Body, `"rule":"x"`)
	require.EqualValues(t, 1, taken(), "y's answer has not arrived")
	close(relay.release)
	eventually(t, "y's late batch is held", func() bool { return taken() == 2 })
	relay.hold.Store(false)

	before := calls()
	for i := range 10 {
		o, _ = doTimed(t, h, hdr("x-k", fmt.Sprint("B", i)), hdr("x-y", "late"))
		require.Zero(t, o.Status, "request %d", i)
	}
	require.EqualValues(t, 10, calls()-before, "x's calls only: y spends the held batch")
	o, _ = doTimed(t, h, hdr("x-k", "C"), hdr("x-y", "late"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 12, calls()-before, "the batch is spent: y asks Redis again")
	require.Zero(t, redisMetric(h, "ratelimit_lease_units_dropped_total;rule=y"))
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}

// TestGlobalWasmLateBatchIsHeld: the compiled module with redis.partitions 1 (the default:
// the request's global rules in one call), one worker. A request's call asks Redis for y's
// lease batch and is held back; the client resets the stream (its context ends), the host
// tears the stream down, and only then does the answer arrive. Redis committed the call, and
// the VM holds the batch as its lease on the key (the filter sends its Redis calls with
// abi.DispatchHttpCallAlways and takes the gone stream's answer on the root context): the
// key's next ten requests cost no call: the batch is debited, so it must be spent or counted.
// Package filter tests the same natively (TestLateBatchIsHeld).
func TestGlobalWasmLateBatchIsHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "%3Alate/")
	rules := xyLeaseRules(`"lease":{"batch":10,"ttl":"1m"}`)
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), front.URL, 1)
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	// The first request loads the script (NOSCRIPT, then the script in full), so that the
	// held call below is the only one its request sends.
	o, _ := doTimed(t, h, hdr("x-k", "A"), hdr("x-y", "first"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 1, taken())

	reset := holdAndReset(t, h, relay, calls, hdr("x-k", "B"), hdr("x-y", "late"))
	reset()
	require.EqualValues(t, 1, taken(), "the call's answer has not arrived")
	close(relay.release)
	eventually(t, "the late batch is held", func() bool { return taken() == 2 })
	relay.hold.Store(false)

	before := calls()
	for i := range 10 {
		o, _ = doTimed(t, h, hdr("x-k", fmt.Sprint("C", i)), hdr("x-y", "late"))
		require.Zero(t, o.Status, "request %d", i)
	}
	require.EqualValues(t, 10, calls()-before, "one call each, with x's item only: y spends the held batch")
	require.EqualValues(t, 2, taken(), "no batch taken for y")
	o, _ = doTimed(t, h, hdr("x-k", "D"), hdr("x-y", "late"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 3, taken(), "the batch is spent: y takes another")
	require.Zero(t, redisMetric(h, "ratelimit_lease_units_dropped_total;rule=y"))
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}

// hostileLate relays script calls to webdis. While hold is set it keeps each call until
// release is closed and then answers it with forged, the answer of a broken or hostile webdis
// (a stand-in in front of Redis), or, when forged is nil, with Redis's own answer. release and
// forged are set before hold.
type hostileLate struct {
	webdis  string
	hold    atomic.Bool
	release chan struct{}
	forged  func(n int64) (status int, body []byte)
	n       atomic.Int64
}

func (r *hostileLate) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if r.hold.Load() {
		n := r.n.Add(1)
		<-r.release
		if r.forged != nil {
			status, forged := r.forged(n)
			w.WriteHeader(status)
			_, _ = w.Write(forged)
			return
		}
	}
	status, answer, err := redistest.Post(r.webdis, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// resetMany starts n requests at once, waits until each one's Redis call is out (calls
// reaches want), and then resets every client's stream together.
func resetMany(t *testing.T, h *wasmhost.Host, n int, calls func() int64, want int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, n)
	for range n {
		go func() {
			_, err := h.Do(ctx, globalRequest())
			done <- err
		}()
	}
	eventually(t, "every request's call is out", func() bool { return calls() == want })
	cancel()
	for range n {
		require.ErrorIs(t, <-done, context.Canceled, "the client reset the stream")
	}
}

// TestGlobalWasmLateHostileAnswers attacks the late-answer path of the compiled module (one
// worker, redis.partitions 1, breaker threshold 6). First eight clients reset their streams
// at once while healthy Redis answers late: every answer is measured once and is a success,
// so resets alone never open the breaker. Then five clients reset while their calls are held,
// and the calls are answered by a hostile stand-in: 200 with bodies that are no script
// result (garbage, a truncated array, a huge body of 1 MiB, an array of the wrong length) and
// a 200 with an empty body. Each late answer must be counted exactly once, as malformed (one
// latency sample, one failure each), open nothing below the threshold, and neither trap, nor
// panic, nor log at error level: a late answer decides nothing, so nothing in it may harm the
// worker. A sixth hostile late answer then opens the breaker (threshold 6 consecutive
// failures), proving the five were heard.
func TestGlobalWasmLateHostileAnswers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	bodies := [][]byte{
		[]byte(`{"EVALSHA":`),
		[]byte(`{"EVALSHA":[1,2`),
		bytes.Repeat([]byte("["), 1<<20),
		[]byte(`{"EVALSHA":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}`),
		nil,
		[]byte(`not json at all`),
	}
	relay := &hostileLate{webdis: srv.WebdisURL()}
	front := httptest.NewServer(relay)
	t.Cleanup(front.Close)
	hold := func(forged func(int64) (int, []byte)) {
		relay.hold.Store(false)
		relay.release, relay.forged = make(chan struct{}), forged
		relay.hold.Store(true)
		release := relay.release
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
	}
	rules := "[" + globalRule("g", `"algorithm":"token_bucket","limit":100000,"window":"1h"`, false) + "]"
	h := newGlobalHost(t, globalConfig(redisOpts{FailureMode: "allow", Failures: 6, Cooldown: "10m"}, rules), front.URL, 1)
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }
	latency := func() uint64 {
		l, _ := h.Histogram("ratelimit_redis_latency_us")
		return l.Count
	}
	malformed := func() int64 { return redisMetric(h, "ratelimit_redis_malformed_total") }
	gauge := func() int64 { return redisMetric(h, "ratelimit_redis_breaker_open") }

	// Healthy Redis, eight resets at once; Redis's own answers arrive once every stream is gone.
	o, _ := doTimed(t, h)
	require.Zero(t, o.Status)
	hold(nil)
	resetMany(t, h, 8, calls, calls()+8)
	require.EqualValues(t, 1, latency(), "no late answer has arrived")
	close(relay.release)
	eventually(t, "every late answer is measured once", func() bool { return latency() == 9 })
	requireNoRedisFailures(t, h)
	require.Zero(t, gauge(), "resets alone never open the breaker")

	forged := func(n int64) (int, []byte) { return 200, bodies[(n-1)%int64(len(bodies))] }
	relay.n.Store(0)
	hold(forged)
	before, beforeLat := calls(), latency()
	resetMany(t, h, 5, calls, before+5)
	require.Zero(t, malformed(), "no answer has arrived")
	close(relay.release)
	eventually(t, "five hostile late answers are heard", func() bool { return malformed() == 5 })
	eventually(t, "and measured once each", func() bool { return latency() == beforeLat+5 })
	require.Zero(t, gauge(), "five failures are below the threshold")
	for _, m := range redisErrorMetrics {
		if m != "ratelimit_redis_malformed_total" {
			require.Zerof(t, redisMetric(h, m), "%s: a malformed answer is counted as malformed only", m)
		}
	}

	// The sixth consecutive failure, also late, opens the breaker.
	hold(forged)
	resetMany(t, h, 1, calls, before+6)
	require.EqualValues(t, 5, malformed(), "the sixth answer is held")
	close(relay.release)
	eventually(t, "the sixth hostile late answer is heard", func() bool { return malformed() == 6 })
	require.EqualValues(t, 1, gauge(), "six late failures in a row open the breaker")

	require.Zero(t, h.Stats().Traps)
	require.Empty(t, h.Stats().FailedVMs)
	requireCleanLogs(t, h)
	for _, e := range h.Logs() {
		require.NotEqual(t, wasmhost.LogError, e.Level, "a late answer logs no error: %+v", e)
	}
}
