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

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

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

// TestGlobalWasmResetGivesLeaseUnitsBack: the compiled module, redis.partitions 1, one worker.
// y's lease (batch 10) holds nine units; a request spends one of them and waits for Redis on
// x, and its client resets the stream. The request never reached the upstream, so its unit
// goes back to y's lease: the key's next nine requests spend the lease, and only the tenth
// takes a new batch. Package filter tests the same natively (TestResetGivesLeaseUnitsBack).
func TestGlobalWasmResetGivesLeaseUnitsBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	relay, front := startHeldBack(t, srv.WebdisURL(), "resetme")
	rules := xyLeaseRules(`"lease":{"batch":10,"ttl":"1m"}`)
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), front.URL, 1)
	taken := func() int64 { return redisMetric(h, "ratelimit_lease_taken_total;rule=y") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	o, _ := doTimed(t, h, hdr("x-k", "A"), hdr("x-y", "k"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 1, taken(), "y holds nine units")

	reset := holdAndReset(t, h, relay, calls, hdr("x-k", "resetme"), hdr("x-y", "k"))
	reset()
	close(relay.release)
	relay.hold.Store(false)

	for i := range 9 {
		o, _ = doTimed(t, h, hdr("x-k", fmt.Sprint("C", i)), hdr("x-y", "k"))
		require.Zero(t, o.Status)
		require.EqualValues(t, 1, taken(), "request %d spends y's lease", i)
	}
	o, _ = doTimed(t, h, hdr("x-k", "D"), hdr("x-y", "k"))
	require.Zero(t, o.Status)
	require.EqualValues(t, 2, taken(), "the lease is spent: y takes another batch")
	require.Zero(t, redisMetric(h, "ratelimit_lease_units_dropped_total;rule=y"))
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}

// overflowLeaseDriver runs requests on a module against real Redis
// (filtertest.OverflowLeaseDriver).
type overflowLeaseDriver struct{ h *wasmhost.Host }

// AdmitY sends a request with x-y: v.
func (d overflowLeaseDriver) AdmitY(t *testing.T, v string) bool {
	o, _ := doTimed(t, d.h, hdr("x-y", v))
	return o.Status == 0
}

// Metric reads a counter of the filter; one never touched reads 0.
func (d overflowLeaseDriver) Metric(_ *testing.T, name string) int64 { return redisMetric(d.h, name) }

// TestGlobalWasmLeaseNeverOnOverflowKey: on the module, against real Redis, new clients that
// find y's key bound reached are decided on y's overflow key, and a lease on y gives them what
// the exact decision gives them, with no Redis failure
// (filtertest.OverflowLeaseCase.CheckNeverOnOverflowKey; package filter runs the same cases
// natively).
func TestGlobalWasmLeaseNeverOnOverflowKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, c := range filtertest.OverflowLeaseCases {
		t.Run(c.Name(), func(t *testing.T) {
			c.CheckNeverOnOverflowKey(t, func(t *testing.T, config string) filtertest.OverflowLeaseDriver {
				srv.MustDo("FLUSHALL")
				h := newGlobalHost(t, config, srv.WebdisURL(), 1)
				t.Cleanup(func() { requireNoRedisFailures(t, h) })
				return overflowLeaseDriver{h}
			})
		})
	}
}

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

// TestOverLimitCacheWasm checks the over-limit cache of a global rule with a lease block
// against real redis-server and webdis: once Redis has denied a key, the proxy denies it with
// no callout until Retry-After has passed, counted in over_limit_cache_hits; another key still
// asks Redis. Without the lease block every denial is a callout.
func TestOverLimitCacheWasm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, leased := range []bool{true, false} {
		t.Run(fmt.Sprintf("lease=%v", leased), func(t *testing.T) {
			lease := ""
			if leased {
				lease = `,"lease":{"batch":2}`
			}
			name := fmt.Sprintf("olc%v", leased)
			rules := "[" + globalRule(name, `"algorithm":"fixed_window","limit":3,"window":"1h"`+lease, true) + "]"
			h := newGlobalHost(t, globalConfig(redisOpts{FailureMode: "deny"}, rules), srv.WebdisURL(), 2)
			for range 3 {
				o, _ := doTimed(t, h, hdr("x-user", "alice"))
				require.Zero(t, o.Status)
			}
			o, _ := doTimed(t, h, hdr("x-user", "alice"))
			require.Equal(t, 429, o.Status)
			calls := redisMetric(h, "ratelimit_redis_calls_total")
			// Both workers, five more denials each.
			for range 10 {
				o, _ := doTimed(t, h, hdr("x-user", "alice"))
				require.Equal(t, 429, o.Status)
				require.NotEmpty(t, o.Headers["retry-after"])
			}
			hits := redisMetric(h, "ratelimit_over_limit_cache_hits_total;rule="+name)
			if leased {
				// The worker that saw Redis's denial caches it; the other asks Redis once.
				require.EqualValues(t, calls+1, redisMetric(h, "ratelimit_redis_calls_total"))
				require.EqualValues(t, 9, hits)
			} else {
				require.EqualValues(t, calls+10, redisMetric(h, "ratelimit_redis_calls_total"))
				require.Zero(t, hits)
			}
			// Another key is not affected.
			o, _ = doTimed(t, h, hdr("x-user", "bob"))
			require.Zero(t, o.Status)
			requireNoRedisFailures(t, h)
			requireCleanLogs(t, h)
		})
	}
}

// TestGlobalLeaseWasm checks global leases on the compiled module against real redis-server
// and webdis, with two proxies (two hosts, each with its own shared data) of several worker
// VMs on one Redis:
//   - near the limit the batches shrink to the request's cost with the remaining allowance
//     Redis reports: a fixed window of 100 admits exactly 100 requests of 160 taking turns over
//     2 proxies x 2 VMs, as without a lease, with fewer callouts than requests;
//   - on a hot key below its limit, 2 proxies x 4 VMs send at most 0.05 callouts per request
//     (batch 100: each VM's first take, then one per 100 requests).
func TestGlobalLeaseWasm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	do := func(h *wasmhost.Host, w int) bool {
		t.Helper()
		req := globalRequest(hdr("x-user", "alice"))
		req.Worker = w
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
		defer cancel()
		res, err := h.Do(ctx, req)
		require.NoError(t, err)
		require.False(t, res.Failed)
		return res.Local == nil
	}
	calls := func(hs []*wasmhost.Host) (n int64) {
		for _, h := range hs {
			n += redisMetric(h, "ratelimit_redis_calls_total")
		}
		return n
	}
	t.Run("exact near the limit", func(t *testing.T) {
		filtertest.WaitForHourWindow(t, srv)
		for _, leased := range []bool{true, false} {
			lease := ""
			if leased {
				lease = `,"lease":{"batch":20,"ttl":"1m"}`
			}
			name := fmt.Sprintf("gl-exact-%v", leased)
			rules := "[" + globalRule(name, `"algorithm":"fixed_window","limit":100,"window":"1h"`+lease, true) + "]"
			cfg := globalConfig(redisOpts{FailureMode: "deny"}, rules)
			hs := []*wasmhost.Host{newGlobalHost(t, cfg, srv.WebdisURL(), 2), newGlobalHost(t, cfg, srv.WebdisURL(), 2)}
			admitted := 0
			for i := range 160 {
				if do(hs[i%2], (i/2)%2) {
					admitted++
				}
			}
			require.Equal(t, 100, admitted, "lease %v", leased)
			n := calls(hs)
			if leased {
				require.Less(t, n, int64(160))
				taken := redisMetric(hs[0], "ratelimit_lease_taken_total;rule="+name) +
					redisMetric(hs[1], "ratelimit_lease_taken_total;rule="+name)
				require.Positive(t, taken)
			} else {
				// Every admission is a callout; the denials after the first are not (without a
				// lease block there is no over-limit cache either).
				require.EqualValues(t, 160, n)
			}
			for _, h := range hs {
				requireNoRedisFailures(t, h)
			}
			t.Logf("lease %v: %d callouts for 160 requests", leased, n)
		}
	})
	t.Run("callouts per request below the limit", func(t *testing.T) {
		rules := "[" + globalRule("gl-hot", `"algorithm":"token_bucket","limit":1000000000,"window":"1h","lease":{"batch":100}`, true) + "]"
		cfg := globalConfig(redisOpts{FailureMode: "deny"}, rules)
		hs := []*wasmhost.Host{newGlobalHost(t, cfg, srv.WebdisURL(), 4), newGlobalHost(t, cfg, srv.WebdisURL(), 4)}
		const requests = 4000
		for i := range requests {
			require.True(t, do(hs[i%2], (i/2)%4))
		}
		per := float64(calls(hs)) / requests
		t.Logf("%.4f callouts per request on 2 proxies x 4 VMs", per)
		require.LessOrEqual(t, per, 0.05)
	})
}
