package moduletest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// heldBack is a relay in front of webdis that holds back the calls whose body contains tag
// while hold is set, until release is closed: the test decides that one rule's answer arrives
// after the request has ended. Every call still reaches the real webdis.
type heldBack struct {
	webdis  string
	tag     string
	hold    atomic.Bool
	release chan struct{}
}

func (r *heldBack) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if r.hold.Load() && bytes.Contains(body, []byte(r.tag)) {
		<-r.release
	}
	resp, err := http.Post(strings.TrimSuffix(r.webdis, "/")+"/", req.Header.Get("content-type"), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	w.WriteHeader(resp.StatusCode)
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
// until the call is out (calls counts the module's Redis calls). The returned reset is the
// client resetting the stream: it returns once the host has torn the stream down. The held
// call is answered when the test closes relay.release.
func holdAndReset(t *testing.T, h *wasmhost.Host, relay *heldBack, calls func() int64, headers ...[2]string) (reset func()) {
	t.Helper()
	relay.hold.Store(true)
	before := calls()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		_, err := h.Do(ctx, globalRequest(headers...))
		done <- err
	}()
	eventually(t, "the request's call is out", func() bool { return calls() == before+1 })
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
