package moduletest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// The tests in this file run global rules end to end: the compiled module in the wazero host,
// its callouts going over real HTTP to a real webdis in front of a real redis-server (started
// by internal/redistest on free loopback ports; with CI=true a missing binary fails the test
// instead of skipping it). Redis decides with its own clock (TIME), so these tests use real
// time for Redis and choose windows long enough that nothing refills while they run. What
// they wait for on the filter's own time (the breaker's cooldown, callout timeouts) runs on
// the host's virtual clock instead (virtualHost, doUntilTimeout), never on real sleeps.

// callDeadline bounds every request of these tests. No request may hang: a request that
// exceeds it fails the test instead of stalling the run.
const callDeadline = 5 * time.Second

// redisOpts and globalConfig are filtertest's, shared with the native tests of package filter.
type redisOpts = filtertest.RedisOpts

var globalConfig = filtertest.GlobalConfig

// globalRule renders one rule with the given algorithm fields, keyed by the x-user header
// when keyed is set.
func globalRule(name, algo string, keyed bool) string {
	key := ""
	if keyed {
		key = `"key":[{"source":"header","name":"x-user"}],`
	}
	return fmt.Sprintf(`{"name":%q,%s%s,"scope":"global"}`, name, key, algo)
}

// newGlobalHost starts the module as one proxy whose "webdis" cluster points at url, with its
// own shared-data store and real time.
func newGlobalHost(t testing.TB, config, url string, workers int) *wasmhost.Host {
	t.Helper()
	return newWasm(t, config, wasmOptions{
		workers:  workers,
		clusters: map[string]string{"webdis": url},
		shared:   wasmhost.NewSharedData(),
		realTime: true,
	}).host
}

func globalRequest(headers ...[2]string) wasmhost.Request {
	return wasmhost.Request{
		Worker: -1, Path: "/", Authority: "example.test", Headers: headers,
		SourceAddress: "192.0.2.1:5555", Upstream: &wasmhost.UpstreamResponse{Status: 200},
	}
}

// doTimed runs one request under callDeadline and returns its outcome and how long it took. It
// must be called from the test goroutine.
func doTimed(t testing.TB, h *wasmhost.Host, headers ...[2]string) (outcome, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	start := time.Now()
	res, err := h.Do(ctx, globalRequest(headers...))
	elapsed := time.Since(start)
	require.NoError(t, err, "the request must complete within %v", callDeadline)
	require.False(t, res.Failed, "the VM failed: %v", res.Local)
	return outcomeOf(res), elapsed
}

// redisMetric reads a counter or gauge; a metric never touched reads 0.
func redisMetric(h *wasmhost.Host, name string) int64 {
	v, _ := h.Metric(name)
	return v
}

// redisErrorMetrics are the failure counters, by kind.
var redisErrorMetrics = []string{
	"ratelimit_redis_unavailable_total", "ratelimit_redis_timeouts_total", "ratelimit_redis_errors_total",
	"ratelimit_redis_malformed_total", "ratelimit_redis_resets_total",
}

// requireNoRedisFailures checks that no callout failed and the VMs never trapped, so a test's
// exact counts cannot have been produced by a failure mode.
func requireNoRedisFailures(t testing.TB, h *wasmhost.Host) {
	t.Helper()
	for _, m := range redisErrorMetrics {
		require.Zerof(t, redisMetric(h, m), "%s", m)
	}
	require.Zero(t, redisMetric(h, "ratelimit_redis_skipped_total"))
	require.Zero(t, h.Stats().Traps, "the VM must never trap")
}

// requireCleanLogs fails on a recovered panic: the filter must handle every answer without
// one, even when it hides it from the host.
func requireCleanLogs(t testing.TB, h *wasmhost.Host) {
	t.Helper()
	for _, e := range h.Logs() {
		require.NotContains(t, e.Message, "panic", "log: %+v", e)
	}
}

// waitWebdis waits until webdis answers a PING with Redis' PONG, e.g. after StartRedis (webdis
// reconnects on its next request, and answers 503 until it has) or until a CLIENT PAUSE ends.
// This waits in real time, for an event outside the module (a process restarting, Redis'
// own pause timer), which no virtual clock controls: it polls for the event, up to
// callDeadline, rather than sleeping for a guessed time.
func waitWebdis(t testing.TB, srv *redistest.Server) {
	t.Helper()
	// webdis hands the reply of a call whose client went away (a callout that timed out while
	// Redis was paused) to the next request it serves on the connection (docs/global-limits.md):
	// a callout that came next would get it, and fail as malformed. Each PING opens a connection
	// of its own, as a callout after a timeout does, and takes such a reply if one is left;
	// three PONGs in a row, and the stalled calls' replies have been handed out.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	pongs := 0
	require.Eventually(t, func() bool {
		resp, err := client.Post(srv.WebdisURL(), "text/plain", strings.NewReader("PING"))
		if err != nil {
			pongs = 0
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && string(body) == `{"PING":[true,"PONG"]}` {
			pongs++
		} else {
			pongs = 0
		}
		return pongs == 3
	}, callDeadline, 10*time.Millisecond, "webdis does not reach Redis")
}

// loadScripts loads every script ahead of time (SCRIPT LOAD), for tests whose counts must not
// include the NOSCRIPT fallback of the first decision.
func loadScripts(t testing.TB, srv *redistest.Server) {
	t.Helper()
	for _, s := range redis.Scripts() {
		require.Equal(t, s.SHA, srv.MustDo("SCRIPT", "LOAD", s.Source), s.Name)
	}
}

// expectedKey is the Redis key a request with x-user: value makes for the rule: the filter's
// descriptor ("<len>:<value>") under the default domain's hash tag, built by the package the
// filter uses.
func expectedKey(rule, value string) string {
	return string(redis.AppendKey(nil, "rl", "rl", rule, []byte(strconv.Itoa(len(value))+":"+value)))
}

// TestGlobalWasmTwoProxiesShareOneLimit is the point of global rules: two independent proxies
// (two Hosts, each with its own shared data, three worker VMs each) admit exactly the limit
// between them, however the requests interleave, because every decision is one atomic script
// in the one Redis.
func TestGlobalWasmTwoProxiesShareOneLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// With the scripts loaded, every decision is exactly one callout.
	loadScripts(t, srv)
	for _, tc := range []struct{ name, algo string }{
		// A token bucket refills one token per 72 s here, and a sliding log frees nothing for an
		// hour: neither can admit a 51st request while the test runs.
		{"token_bucket", `"algorithm":"token_bucket","limit":50,"window":"1h"`},
		{"sliding_window_log", `"algorithm":"sliding_window","variant":"log","limit":50,"window":"1h"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "shared-" + strings.ReplaceAll(tc.name, "_", "-")
			cfg := globalConfig(redisOpts{Timeout: "5s", FailureMode: "deny"}, "["+globalRule(name, tc.algo, false)+"]")
			proxies := []*wasmhost.Host{
				newGlobalHost(t, cfg, srv.WebdisURL(), 3),
				newGlobalHost(t, cfg, srv.WebdisURL(), 3),
			}
			const total = 150
			var (
				wg                       sync.WaitGroup
				mu                       sync.Mutex
				admitted, denied, others int
				problems                 []string
			)
			start := make(chan struct{})
			for i := range total {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
					defer cancel()
					res, err := proxies[i%2].Do(ctx, globalRequest())
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						problems = append(problems, err.Error())
					case res.Local == nil:
						admitted++
					case res.Local.Status == 429:
						denied++
						if got := firstHeader(res.Local.Headers, "x-ratelimit-limit"); got != "50" {
							problems = append(problems, "denial with x-ratelimit-limit "+got)
						}
					default:
						others++
					}
				}()
			}
			close(start)
			wg.Wait()
			require.Empty(t, problems)
			require.Zero(t, others, "no request may get anything but 200 or 429")
			require.Equal(t, 50, admitted, "the two proxies together admit exactly the limit")
			require.Equal(t, total-50, denied)

			var calls int64
			for _, p := range proxies {
				requireNoRedisFailures(t, p)
				calls += redisMetric(p, "ratelimit_redis_calls_total")
				require.Positive(t, redisMetric(p, "ratelimit_redis_calls_total"), "both proxies asked Redis")
			}
			require.EqualValues(t, total, calls, "one callout per request")
			require.EqualValues(t, 1, srv.Int("EXISTS", "rl:{rl}:"+name+":"), "the rule's one key")
		})
	}
}

// firstHeader returns the first value of a header in a local response's header list.
func firstHeader(headers [][2]string, name string) string {
	for _, kv := range headers {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	return ""
}

// TestGlobalWasmAlgorithms runs every algorithm that has a global mode through the filter: three
// requests are admitted, the fourth is denied, and every header is the one Redis' decision
// implies. Windows are an hour long, so the expected values are exact: bucket algorithms
// refill a few microseconds' worth while the test runs, which whole-second headers round away,
// and clock-aligned windows are computed from Redis' own TIME read around each request.
func TestGlobalWasmAlgorithms(t *testing.T) {
	srv := redistest.Start(t)
	const W = time.Hour
	// untilWindowEnd is the time from now to the end of the clock-aligned window now is in.
	untilWindowEnd := func(now time.Time) time.Duration {
		ns := now.UnixNano()
		return time.Duration(int64(W) - ns%int64(W))
	}
	// A clock-aligned window must not end in the middle of a sequence: if the boundary is
	// close, wait until it has passed. The window is on Redis' clock (TIME), outside the
	// module and the host, so this waits in real time, for Redis' clock to pass the boundary.
	// It polls Redis' clock (on the test goroutine, as RedisTime may fail the test) rather
	// than sleeping for a time computed from one reading.
	for untilWindowEnd(filtertest.RedisTime(t, srv)) < 10*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	// The headers give whole seconds, rounded up, as the filter's ceilSeconds does.
	secs := func(d time.Duration) string {
		return strconv.FormatInt(int64((max(d, 0)+time.Second-1)/time.Second), 10)
	}
	fixed := func(d time.Duration) func(time.Time) string {
		return func(time.Time) string { return secs(d) }
	}

	type want struct {
		remaining string
		// reset and retry give the header values (whole seconds) for a decision Redis made at
		// the given instant of its clock.
		reset func(now time.Time) string
		retry func(now time.Time) string // for the denial
	}
	// slice is the sliding-window counter's weight resolution: W / 10^6.
	slice := W / 1_000_000
	for _, tc := range []struct {
		name  string
		algo  string
		steps []want
	}{
		{
			name: "token_bucket", algo: `"algorithm":"token_bucket","limit":3,"window":"1h"`,
			// One token comes back every 20 minutes; the reset is the time until all are back.
			steps: []want{
				{"2", fixed(20 * time.Minute), nil}, {"1", fixed(40 * time.Minute), nil},
				{"0", fixed(time.Hour), nil}, {"0", fixed(time.Hour), fixed(20 * time.Minute)},
			},
		},
		{
			name: "leaky_bucket", algo: `"algorithm":"leaky_bucket","limit":3,"window":"1h"`,
			steps: []want{
				{"2", fixed(20 * time.Minute), nil}, {"1", fixed(40 * time.Minute), nil},
				{"0", fixed(time.Hour), nil}, {"0", fixed(time.Hour), fixed(20 * time.Minute)},
			},
		},
		{
			name: "gcra", algo: `"algorithm":"gcra","limit":3,"window":"1h","burst":3`,
			steps: []want{
				{"2", fixed(20 * time.Minute), nil}, {"1", fixed(40 * time.Minute), nil},
				{"0", fixed(time.Hour), nil}, {"0", fixed(time.Hour), fixed(20 * time.Minute)},
			},
		},
		{
			name: "sliding_window_log", algo: `"algorithm":"sliding_window","variant":"log","limit":3,"window":"1h"`,
			// Every admitted request stays in the log for the whole window.
			steps: []want{
				{"2", fixed(time.Hour), nil}, {"1", fixed(time.Hour), nil},
				{"0", fixed(time.Hour), nil}, {"0", fixed(time.Hour), fixed(time.Hour)},
			},
		},
		{
			name: "fixed_window", algo: `"algorithm":"fixed_window","limit":3,"window":"1h"`,
			steps: func() []want {
				end := func(now time.Time) string { return secs(untilWindowEnd(now)) }
				return []want{{"2", end, nil}, {"1", end, nil}, {"0", end, nil}, {"0", end, end}}
			}(),
		},
		{
			name: "sliding_window_counter", algo: `"algorithm":"sliding_window","limit":3,"window":"1h"`,
			// The key is fresh, so the previous window is empty: the count is reset one window
			// after the current one ends, and the request can pass again once the current
			// window's 3 events weigh at most 2 in the next one, i.e. a third of the way into
			// it, rounded up to a whole slice (S - floor(2S/3) = 333334 slices).
			steps: func() []want {
				reset := func(now time.Time) string { return secs(untilWindowEnd(now) + W) }
				retry := func(now time.Time) string { return secs(untilWindowEnd(now) + 333334*slice) }
				return []want{{"2", reset, nil}, {"1", reset, nil}, {"0", reset, nil}, {"0", reset, retry}}
			}(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "g-" + strings.ReplaceAll(tc.name, "_", "-")
			// Every algorithm runs in the one script; flushing it makes each case start from a
			// Redis that has lost it.
			srv.MustDo("SCRIPT", "FLUSH")
			h := newGlobalHost(t, globalConfig(redisOpts{}, "["+globalRule(name, tc.algo, true)+"]"), srv.WebdisURL(), 2)
			user := hdr("x-user", "alice")
			for i, w := range tc.steps {
				before := filtertest.RedisTime(t, srv)
				got, _ := doTimed(t, h, user)
				after := filtertest.RedisTime(t, srv)
				denied := w.retry != nil
				if denied {
					require.Equalf(t, 429, got.Status, "step %d: %v", i, got)
				} else {
					require.Zerof(t, got.Status, "step %d must be admitted: %v", i, got)
				}
				require.Equalf(t, "3", got.Headers["x-ratelimit-limit"], "step %d", i)
				require.Equalf(t, w.remaining, got.Headers["x-ratelimit-remaining"], "step %d", i)
				// Redis decided at some instant between the two TIME reads; a window-aligned
				// value is exact unless a second boundary fell in between, when either side's
				// value is right.
				check := func(header string, f func(time.Time) string, format func(string) string) {
					t.Helper()
					lo, hi := format(f(after)), format(f(before))
					if v := got.Headers[header]; v != lo && v != hi {
						require.Failf(t, "wrong header", "step %d: %s = %q, want %q (or %q)", i, header, v, hi, lo)
					}
				}
				check("x-ratelimit-reset", w.reset, func(s string) string { return s })
				check("ratelimit", w.reset, func(s string) string { return `"` + name + `";r=` + w.remaining + ";t=" + s })
				require.Equalf(t, `"`+name+`";q=3;w=3600`, got.Headers["ratelimit-policy"], "step %d", i)
				if denied {
					check("retry-after", w.retry, func(s string) string { return s })
					require.Containsf(t, got.Body, `"rule":"`+name+`"`, "step %d", i)
				}
			}
			require.EqualValues(t, 1, srv.Int("EXISTS", expectedKey(name, "alice")), "the decision lives in Redis")
			// The script was flushed, so the first decision found it missing and was resent as
			// EVAL: one callout more than requests.
			require.EqualValues(t, len(tc.steps)+1, redisMetric(h, "ratelimit_redis_calls_total"))
			require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_noscript_total"))
			requireNoRedisFailures(t, h)
			// The allowed counter counts admissions on both workers; the denial is counted once.
			require.EqualValues(t, 3, redisMetric(h, "ratelimit_requests_total;rule="+name+";decision=allowed"))
			require.EqualValues(t, 1, redisMetric(h, "ratelimit_requests_total;rule="+name+";decision=denied"))
		})
	}
}

// fault is one way the Redis path fails, and what the filter must make of it.
type fault struct {
	name string
	// url is the webdis cluster's address while the fault is active.
	url string
	// inject and repair start and end the fault, when it is not in the URL.
	inject, repair func()
	// metric is the failure counter each failed decision increments.
	metric string
	// slow is set when every failure costs the callout timeout: the test runs it on the host's
	// virtual clock and advances the clock by the timeout.
	slow bool
}

// TestGlobalWasmFailureModes injects each fault and checks every failure mode: "allow" lets the
// requests through without rate-limit headers, "deny" rejects them with the rule's denial,
// "local" applies the rule's own limit on the proxy's shared data (so each proxy admits one
// limit). No request hangs (each must complete within callDeadline), and each failure is
// counted under its kind. The fault that costs the callout timeout runs on the host's virtual
// clock: the request is decided exactly when the clock reaches the timeout
// (TestGlobalWasmCalloutTimeoutRealTime is its real-time smoke test).
func TestGlobalWasmFailureModes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const timeout = 300 * time.Millisecond
	faults := []fault{
		{name: "redis stopped (webdis answers 503)", url: srv.WebdisURL(),
			inject: srv.StopRedis, repair: func() { srv.StartRedis(); waitWebdis(t, srv) },
			metric: "ratelimit_redis_unavailable_total"},
		{name: "webdis stopped (connection refused, Envoy answers 503)", url: srv.WebdisURL(),
			inject: srv.StopWebdis, repair: srv.StartWebdis, metric: "ratelimit_redis_unavailable_total"},
		// Webdis answers a second after the timeout in real time; the callout's timeout, on
		// the host's virtual clock, has decided long before.
		{name: "webdis slower than the timeout (Envoy answers 504)", url: srv.SlowProxy(timeout + time.Second),
			metric: "ratelimit_redis_timeouts_total", slow: true},
		{name: "garbage answer", url: redistest.GarbageServer(t, 200, []byte("<html>oops</html>")),
			metric: "ratelimit_redis_malformed_total"},
		{name: "truncated answer", url: redistest.GarbageServer(t, 200, []byte(`{"EVALSHA":[1,3,2,0,`)),
			metric: "ratelimit_redis_malformed_total"},
		{name: "webdis ACL refuses (403)", url: redistest.GarbageServer(t, 403, []byte(`{"EVALSHA":[false,"forbidden"]}`)),
			metric: "ratelimit_redis_malformed_total"},
		{name: "error reply", url: redistest.GarbageServer(t, 200, []byte(`{"EVALSHA":[false,"ERR something broke"]}`)),
			metric: "ratelimit_redis_errors_total"},
		{name: "redis out of memory (real error reply)", url: srv.WebdisURL(),
			inject: func() {
				// Loaded scripts make EVALSHA itself fail, rather than NOSCRIPT and an EVAL.
				loadScripts(t, srv)
				srv.MustDo("CONFIG", "SET", "maxmemory", "1")
			},
			repair: func() { srv.MustDo("CONFIG", "SET", "maxmemory", "0") },
			metric: "ratelimit_redis_errors_total"},
		{name: "callout reset", url: "reset:", metric: "ratelimit_redis_resets_total"},
	}
	rules := "[" + globalRule("fm", `"algorithm":"token_bucket","limit":2,"window":"1h"`, false) + "]"
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			if f.inject != nil {
				f.inject()
				t.Cleanup(f.repair)
			}
			for _, mode := range []string{"allow", "deny", "local"} {
				t.Run(mode, func(t *testing.T) {
					// A fault answered at once gets a timeout a loaded machine cannot reach, so
					// that it is counted as itself, never as a timeout; the slow fault's timeout
					// runs on the virtual clock.
					tmo := 5 * time.Second
					if f.slow {
						tmo = timeout
					}
					cfg := globalConfig(redisOpts{Timeout: tmo.String(), FailureMode: mode}, rules)
					// Under "local", two proxies of two workers: the local fallback counts on
					// each proxy's shared data, across its workers. Under "allow" and "deny"
					// one worker decides all three requests (fewer than the breaker's five
					// failures).
					proxies, workers := 1, 1
					if mode == "local" {
						proxies, workers = 2, 2
					}
					for p := range proxies {
						var h *wasmhost.Host
						var do func() outcome
						if f.slow {
							h, do = virtualGlobalHost(t, cfg, f.url, workers, timeout)
						} else {
							h = newGlobalHost(t, cfg, f.url, workers)
							do = func() outcome { o, _ := doTimed(t, h); return o }
						}
						for i := range 3 {
							got := do()
							switch {
							case mode == "allow":
								require.Zerof(t, got.Status, "request %d: %v", i, got)
								require.NotContains(t, got.Headers, "ratelimit", "no decision, no headers")
							case mode == "deny":
								require.Equalf(t, 429, got.Status, "request %d: %v", i, got)
								require.Equal(t, "1", got.Headers["retry-after"])
								require.Equal(t, `"fm";r=0;t=1`, got.Headers["ratelimit"])
							case i < 2:
								require.Zerof(t, got.Status, "proxy %d request %d: %v", p, i, got)
								require.Equal(t, `"fm";r=`+strconv.Itoa(1-i)+";t="+strconv.Itoa((i+1)*1800),
									got.Headers["ratelimit"], "the local decision's headers")
							default:
								require.Equalf(t, 429, got.Status, "proxy %d: the rule's limit applies locally: %v", p, got)
								require.Equal(t, "1800", got.Headers["retry-after"])
							}
						}
						require.EqualValues(t, 3, redisMetric(h, f.metric), "every failure counted as %s", f.metric)
						for _, m := range redisErrorMetrics {
							if m != f.metric {
								require.Zerof(t, redisMetric(h, m), "%s", m)
							}
						}
						require.EqualValues(t, 3, redisMetric(h, "ratelimit_redis_calls_total"))
						require.Zero(t, redisMetric(h, "ratelimit_redis_breaker_open"))
						require.Zero(t, h.Stats().Traps)
						requireCleanLogs(t, h)
					}
				})
			}
		})
	}
	// After every fault is repaired, the same path works again.
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), srv.WebdisURL(), 1)
	got, _ := doTimed(t, h)
	require.Zero(t, got.Status)
	require.Equal(t, `"fm";r=1;t=1800`, got.Headers["ratelimit"])
	requireNoRedisFailures(t, h)
}

// virtualGlobalHost starts the module as one proxy on a virtual clock, whose "webdis" cluster
// points at url, and returns a function that sends one request and advances the clock by
// exactly timeout once the request's callout (and its timeout) is pending. The request must
// then be decided: it returns at the virtual instant its callout timed out.
func virtualGlobalHost(t *testing.T, config, url string, workers int, timeout time.Duration) (*wasmhost.Host, func() outcome) {
	t.Helper()
	clock := wasmhost.NewVirtualClock(t0)
	h := newWasm(t, config, wasmOptions{
		workers:  workers,
		clusters: map[string]string{"webdis": url},
		shared:   wasmhost.NewSharedData(),
		clock:    clock,
	}).host
	return h, func() outcome { t.Helper(); return doUntilTimeout(t, h, clock, timeout) }
}

// doUntilTimeout sends one request to a host on a virtual clock and advances the clock by
// exactly timeout once the request's callout (and its timeout) is pending. The request must
// then be decided: it returns at the virtual instant its callout timed out (a continued
// request's ContinuedAt says so exactly).
func doUntilTimeout(t *testing.T, h *wasmhost.Host, clock *wasmhost.VirtualClock, timeout time.Duration) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	before := clock.Pending()
	f := send(h, []wasmhost.Request{globalRequest()})
	require.True(t, clock.WaitPending(ctx, before+1), "the callout's timeout is armed on the virtual clock")
	start := clock.Now()
	clock.Advance(timeout)
	res := f.wait(t)[0]
	require.False(t, res.Failed, "the VM failed: %v", res.Local)
	if res.Continued {
		require.Equal(t, start.Add(timeout), res.ContinuedAt, "decided when the callout timed out")
	}
	return outcomeOf(res)
}

// TestGlobalWasmCalloutTimeoutRealTime is the real-time smoke test of the callout timeout: a
// webdis that answers only after 300 ms, a 100 ms timeout on real timers, failure_mode
// "allow": the request passes without rate-limit headers and the failure is counted as a
// timeout. (TestGlobalWasmFailureModes checks every mode on the virtual clock.)
func TestGlobalWasmCalloutTimeoutRealTime(t *testing.T) {
	srv := redistest.Start(t)
	rules := "[" + globalRule("rt", `"algorithm":"token_bucket","limit":2,"window":"1h"`, false) + "]"
	h := newGlobalHost(t, globalConfig(redisOpts{Timeout: "100ms", FailureMode: "allow"}, rules), srv.SlowProxy(300*time.Millisecond), 1)
	got, _ := doTimed(t, h)
	require.Zero(t, got.Status, "%v", got)
	require.NotContains(t, got.Headers, "ratelimit")
	require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_timeouts_total"))
	require.Zero(t, h.Stats().Traps)
}

// TestGlobalWasmNoScript flushes Redis' script cache under a running proxy: the next decision's
// EVALSHA is answered NOSCRIPT, the filter resends it once as EVAL (which loads the script
// again), and the request is decided by Redis as if nothing happened.
func TestGlobalWasmNoScript(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rules := "[" + globalRule("ns", `"algorithm":"fixed_window","limit":10,"window":"1h"`, false) + "]"
	h := newGlobalHost(t, globalConfig(redisOpts{FailureMode: "deny"}, rules), srv.WebdisURL(), 1)

	// The very first decision already finds an empty script cache: nothing loads the scripts
	// ahead of time.
	got, _ := doTimed(t, h)
	require.Zero(t, got.Status)
	require.Equal(t, "9", got.Headers["x-ratelimit-remaining"])
	require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_noscript_total"))
	require.EqualValues(t, 2, redisMetric(h, "ratelimit_redis_calls_total"), "EVALSHA, then EVAL")

	got, _ = doTimed(t, h)
	require.Equal(t, "8", got.Headers["x-ratelimit-remaining"])
	require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_noscript_total"), "EVAL loaded the script")
	require.EqualValues(t, 3, redisMetric(h, "ratelimit_redis_calls_total"))

	require.Equal(t, "OK", srv.MustDo("SCRIPT", "FLUSH"))
	got, _ = doTimed(t, h)
	require.Zero(t, got.Status)
	require.Equal(t, "7", got.Headers["x-ratelimit-remaining"], "the resent EVAL decided, once")
	require.EqualValues(t, 2, redisMetric(h, "ratelimit_redis_noscript_total"))
	require.EqualValues(t, 5, redisMetric(h, "ratelimit_redis_calls_total"))

	got, _ = doTimed(t, h)
	require.Equal(t, "6", got.Headers["x-ratelimit-remaining"])
	require.EqualValues(t, 2, redisMetric(h, "ratelimit_redis_noscript_total"))
	require.EqualValues(t, 6, redisMetric(h, "ratelimit_redis_calls_total"))
	// NOSCRIPT is recovered from, not a failure.
	requireNoRedisFailures(t, h)
}

// TestGlobalWasmBreaker trips the breaker with slow failures (Redis paused: every callout costs
// the timeout), then checks that an open breaker answers at once, that it stays open for
// exactly the cooldown, that after the cooldown one probe (and only one) goes to Redis, that a
// failed probe opens it again, and that a probe that succeeds closes it. One worker: the
// breaker is per worker VM.
//
// The host runs on a virtual clock: the callout timeout and the breaker's cooldown (which the
// filter reads through proxy_get_current_time_nanoseconds) are both the host's time, so every
// instant is exact and no real timer is raced. A request "answered at once" is one that
// returns while the clock stands still: a request held for Redis could only end when the
// clock reaches its callout timeout, so it would run into callDeadline and fail the test.
func TestGlobalWasmBreaker(t *testing.T) {
	srv := redistest.Start(t)
	const (
		timeout  = 400 * time.Millisecond
		cooldown = 200 * time.Millisecond
		// pause is real time (Redis' own), and must only outlast the failing phase, which
		// takes no real waiting on the virtual clock; its end is then awaited as an event.
		pause = time.Second
	)
	rules := "[" + globalRule("br", `"algorithm":"token_bucket","limit":1000,"window":"1h"`, false) + "]"
	h, clock := virtualHost(t, globalConfig(redisOpts{Timeout: timeout.String(), FailureMode: "allow",
		Failures: 3, Cooldown: cooldown.String()}, rules), 1, map[string]string{"webdis": srv.WebdisURL()})
	gauge := func() int64 { return redisMetric(h, "ratelimit_redis_breaker_open") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }
	skipped := func() int64 { return redisMetric(h, "ratelimit_redis_skipped_total") }
	// skippedAtOnce sends one request that the open breaker must answer with the clock
	// standing still, without a callout.
	skippedAtOnce := func(want int64) {
		t.Helper()
		sent := calls()
		got, _ := doTimed(t, h)
		require.Zero(t, got.Status, "failure_mode allow")
		require.NotContains(t, got.Headers, "ratelimit")
		require.Equal(t, sent, calls(), "no callout while open")
		require.Equal(t, want, skipped())
	}

	got, _ := doTimed(t, h)
	require.Contains(t, got.Headers, "ratelimit", "decided by Redis")

	// CLIENT PAUSE stalls every Redis client, webdis included, until it expires by itself:
	// a Redis that accepts connections and never answers.
	pausedAt := time.Now()
	srv.MustDo("CLIENT", "PAUSE", strconv.FormatInt(pause.Milliseconds(), 10), "ALL")
	for i := range 3 {
		require.Zero(t, gauge(), "closed before failure %d", i+1)
		// A closed breaker waits for Redis: the request is decided exactly when its callout
		// times out (doUntilTimeout checks ContinuedAt).
		got := doUntilTimeout(t, h, clock, timeout)
		require.Zero(t, got.Status, "failure_mode allow")
		require.NotContains(t, got.Headers, "ratelimit")
	}
	require.EqualValues(t, 3, redisMetric(h, "ratelimit_redis_timeouts_total"))
	require.EqualValues(t, 1, gauge(), "open after 3 consecutive failures")

	// Open: no callout, no waiting, until the cooldown has passed to the nanosecond.
	sent := calls()
	for i := range 3 {
		skippedAtOnce(int64(i + 1))
	}
	clock.Advance(cooldown - time.Nanosecond)
	skippedAtOnce(4)
	clock.Advance(time.Nanosecond)

	// After the cooldown one probe goes out; while it is in flight, other requests are still
	// skipped. Redis is still paused, so the probe fails and the breaker opens again.
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	before := clock.Pending()
	probe := send(h, []wasmhost.Request{globalRequest()})
	require.True(t, clock.WaitPending(ctx, before+1), "the probe's callout timeout is armed")
	require.Equal(t, sent+1, calls(), "the probe is sent")
	probeAt := clock.Now()
	skippedAtOnce(5)
	require.Zero(t, probe.returned.Load(), "the probe waits for Redis")
	clock.Advance(timeout)
	res := probe.wait(t)[0]
	require.True(t, res.Continued, "failure_mode allow: %+v", res.Local)
	require.Equal(t, probeAt.Add(timeout), res.ContinuedAt, "the probe waited for Redis until its timeout")
	require.EqualValues(t, 4, redisMetric(h, "ratelimit_redis_timeouts_total"))
	require.EqualValues(t, 1, gauge(), "a failed probe opens the breaker again")
	require.Equal(t, sent+1, calls(), "exactly one probe")
	skippedAtOnce(6)
	require.Less(t, time.Since(pausedAt), pause, "the pause must outlast the failing phase; raise it")

	// Redis comes back when the pause expires (real time: Redis' own, awaited as an event);
	// after the cooldown the next request probes, succeeds and closes the breaker, and the
	// request is decided by Redis.
	waitWebdis(t, srv)
	clock.Advance(cooldown)
	got, _ = doTimed(t, h)
	require.Contains(t, got.Headers, "ratelimit", "the probe was decided by Redis")
	require.Zero(t, gauge(), "a successful probe closes the breaker")
	for range 3 {
		before := calls()
		got, _ := doTimed(t, h)
		require.Contains(t, got.Headers, "ratelimit")
		require.Equal(t, before+1, calls(), "closed: every request asks Redis")
	}
	require.EqualValues(t, 6, skipped())
	require.Zero(t, h.Stats().Traps)
	requireCleanLogs(t, h)
}

// TestGlobalWasmBreakerProbeOfDeadStream lets the breaker's probe belong to a request whose
// downstream goes away before Redis answers. Envoy does not cancel the callout, and the filter
// takes the dead stream's answer (abi.DispatchHttpCallAlways): the probe's late success closes
// the breaker, with no second probe. (Were the answer lost, the breaker would probe again once
// the probe had been unanswered for the callout timeout: filter TestBreakerLostProbeIsReplaced.)
//
// The host runs on a virtual clock, so the breaker's cooldown is advanced exactly, and the
// callout's 1 s timeout (also the host's time) never expires: the answer that closes the
// breaker can only be the dead stream's late one. Redis' pause is real time (Redis' own): it
// must only outlast the moment the downstream goes away, and its end is awaited as an event.
func TestGlobalWasmBreakerProbeOfDeadStream(t *testing.T) {
	srv := redistest.Start(t)
	const cooldown = 200 * time.Millisecond
	rules := "[" + globalRule("probe", `"algorithm":"token_bucket","limit":1000,"window":"1h"`, false) + "]"
	h, clock := virtualHost(t, globalConfig(redisOpts{Timeout: "1s", FailureMode: "allow",
		Failures: 1, Cooldown: cooldown.String()}, rules), 1, map[string]string{"webdis": srv.WebdisURL()})
	gauge := func() int64 { return redisMetric(h, "ratelimit_redis_breaker_open") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	got, _ := doTimed(t, h)
	require.Contains(t, got.Headers, "ratelimit")
	srv.StopRedis()
	doTimed(t, h)
	require.EqualValues(t, 1, gauge(), "one failure opens this breaker")
	srv.StartRedis()
	waitWebdis(t, srv)

	// Redis stalls for a while, so the probe's answer comes late; its downstream gives up
	// first (as soon as the probe is sent).
	const pause = 600 * time.Millisecond
	pausedAt := time.Now()
	srv.MustDo("CLIENT", "PAUSE", strconv.FormatInt(pause.Milliseconds(), 10), "ALL")
	clock.Advance(cooldown - time.Nanosecond)
	sent := calls()
	got, _ = doTimed(t, h)
	require.NotContains(t, got.Headers, "ratelimit", "open until the cooldown has passed")
	require.Equal(t, sent, calls(), "no probe before the cooldown")
	clock.Advance(time.Nanosecond)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := h.Do(ctx, globalRequest()); errc <- err }()
	// (A request that ends by itself, not sent as the probe, ends the wait too.)
	eventually(t, "the probe is sent", func() bool { return calls() == sent+1 || len(errc) > 0 })
	require.Equal(t, sent+1, calls(), "the request is the probe")
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled, "the downstream went away before Redis answered")
	require.Less(t, time.Since(pausedAt), pause, "the pause must outlast the downstream; raise it")
	require.EqualValues(t, 1, gauge(), "the probe is unanswered")

	// The late answer arrives once Redis resumes, and closes the breaker by itself. (Redis
	// restarted without the script, so the answer is NOSCRIPT: an answer of a Redis that is
	// up, which nobody resends for a gone request.)
	eventually(t, "the dead stream's probe answer closes the breaker", func() bool { return gauge() == 0 })
	require.Equal(t, sent+1, calls(), "no second probe")
	got, _ = doTimed(t, h)
	require.Contains(t, got.Headers, "ratelimit", "decided by Redis again")
	require.Zero(t, h.Stats().Traps)
	requireCleanLogs(t, h)
}

// TestGlobalWasmBreakerProbeWithTwoRules lets the probe belong to a request that two global
// rules apply to, under failure_mode "deny". The probe must cover the whole request: if the
// second rule were skipped because the breaker is open, its failure mode would deny the request
// at once, and the probe would decide nothing for any request while every request matches both
// rules (its answer, arriving for a gone stream, would still reach the breaker).
func TestGlobalWasmBreakerProbeWithTwoRules(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(t, srv)
	const cooldown = 200 * time.Millisecond
	rules := "[" + strings.Replace(globalRule("two-a", `"algorithm":"fixed_window","limit":1000,"window":"1h"`, false),
		`"scope"`, `"continue":true,"scope"`, 1) + "," +
		globalRule("two-b", `"algorithm":"gcra","limit":1000,"window":"1h"`, false) + "]"
	h, clock := virtualHost(t, globalConfig(redisOpts{Timeout: "500ms", FailureMode: "deny",
		Failures: 1, Cooldown: cooldown.String()}, rules), 1, map[string]string{"webdis": srv.WebdisURL()})
	gauge := func() int64 { return redisMetric(h, "ratelimit_redis_breaker_open") }
	skipped := func() int64 { return redisMetric(h, "ratelimit_redis_skipped_total") }
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }

	got, _ := doTimed(t, h)
	require.Zero(t, got.Status, "%v", got)
	require.Contains(t, got.Headers["ratelimit"], `"two-a"`)
	require.Contains(t, got.Headers["ratelimit"], `"two-b"`)

	srv.StopRedis()
	got, _ = doTimed(t, h)
	require.Equal(t, 429, got.Status, "failure_mode deny")
	require.EqualValues(t, 1, gauge())
	srv.StartRedis()
	waitWebdis(t, srv)
	loadScripts(t, srv)

	// The breaker's cooldown is the filter's own time, on the host's virtual clock: until it
	// has passed, the open breaker denies at once; the first request after it is the probe,
	// which must ask Redis for both rules and so close the breaker by itself.
	clock.Advance(cooldown - time.Nanosecond)
	sent := calls()
	got, _ = doTimed(t, h)
	require.Equal(t, 429, got.Status, "open: failure_mode deny")
	require.EqualValues(t, 1, skipped())
	require.Equal(t, sent, calls(), "no callout while open")
	clock.Advance(time.Nanosecond)
	got, _ = doTimed(t, h)
	require.Zero(t, got.Status, "the probe is decided by Redis: %v", got)
	require.Contains(t, got.Headers["ratelimit"], `"two-a"`, "the probe covers the whole request")
	require.Contains(t, got.Headers["ratelimit"], `"two-b"`, "the probe covers the whole request")
	require.Equal(t, sent+1, calls(), "one callout for both rules")
	require.Zero(t, gauge(), "the breaker closes on the probe (skipped %d, calls %d)", skipped(), calls())
	got, _ = doTimed(t, h)
	require.Zero(t, got.Status, "%v", got)
	require.Contains(t, got.Headers["ratelimit"], `"two-b"`)
	require.Zero(t, h.Stats().Traps)
	requireCleanLogs(t, h)
}

// TestGlobalWasmInjection sends keys made of header values that mean something to webdis or
// Redis. Each must reach Redis as exactly one argument: one key per distinct value, under the
// rule's hash tag, holding exactly the value (the key is computed independently here), and a
// decision carrying the rule's real limit, which a shifted argument would replace.
func TestGlobalWasmInjection(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const rule = "inj"
	rules := "[" + globalRule(rule, `"algorithm":"token_bucket","limit":7,"window":"1h"`, true) + "]"
	// max_key_bytes above the longest value, 4,096 bytes and its length prefix: long values
	// reach Redis verbatim.
	config := strings.Replace(globalConfig(redisOpts{FailureMode: "deny"}, rules), "{", `{"max_key_bytes":8192,`, 1)
	h := newGlobalHost(t, config, srv.WebdisURL(), 2)
	values := []string{
		"plain",
		"a/b",
		"a%2Fb", // must not be decoded into "a/b"
		"a%2fb",
		"%",
		"%zz",
		"a+b", // must not become "a b"
		"a b",
		"a?b=c", // webdis cuts the body at a raw '?'
		"?",
		"report.json", // webdis strips a known extension and changes the reply format
		"x.txt",
		"x.raw",
		"k/1/1000000/3600000", // an attempt to supply n, limit and window itself
		"k/1/1000000/3600000/0/0",
		"1/SET/x/y", // a leading number selects a database in webdis
		"line1\nline2",
		"crlf\r\nEVAL/return 1/0",
		"#keys", // the rule's key set is <prefix>#keys, a value's key <prefix>5:#keys
		strings.Repeat("A", 4096),
		strings.Repeat("/", 4096),
		"\xff\xfe\x80 invalid UTF-8",
		"\xc3\x28",
		"",
	}
	prefix := "rl:{rl}:" + rule + ":"
	seen := map[string]bool{}
	for i, v := range values {
		key := expectedKey(rule, v)
		require.Falsef(t, seen[key], "values %d: two values, one key", i)
		seen[key] = true
		for n := range 2 {
			before := srv.Int("DBSIZE")
			got, _ := doTimed(t, h, hdr("x-user", v))
			require.Zerof(t, got.Status, "value %q request %d: %v", v, n, got)
			require.Equalf(t, "7", got.Headers["x-ratelimit-limit"], "value %q: the rule's own limit", v)
			require.Equalf(t, strconv.Itoa(6-n), got.Headers["x-ratelimit-remaining"], "value %q: n = 1", v)
			wantGrowth := int64(1)
			if n > 0 {
				wantGrowth = 0
			} else if i == 0 {
				wantGrowth = 2 // the rule's key set too (max_keys)
			}
			require.Equalf(t, before+wantGrowth, srv.Int("DBSIZE"), "value %q request %d", v, n)
			require.EqualValuesf(t, 1, srv.Int("EXISTS", key), "value %q: key %q", v, key)
		}
		// The key holds the rule's token-bucket state: the script, not a command smuggled in
		// through the value, wrote it.
		require.Equalf(t, "18", srv.MustDo("HGET", key, "v"), "value %q", v)
	}
	keys := srv.Keys()
	require.Len(t, keys, len(values)+1, "one key per distinct value and the rule's key set, nothing else")
	require.EqualValues(t, len(values), srv.Int("ZCARD", prefix+"#keys"), "the key set holds every key")
	for _, k := range keys {
		require.Truef(t, strings.HasPrefix(k, prefix), "key %q outside the rule's keys", k)
		require.LessOrEqual(t, len(k), len(prefix)+8192, "keys are bounded by max_key_bytes")
	}
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}

// TestGlobalWasmDeadStream tears a request down while its callout is in flight (the downstream
// gave up before a slow webdis answered). The answer still arrives at the root context, for a
// stream that is gone: it must be handled without a trap (it decides nothing, and is
// measured like every answer), and the worker must go on serving requests, including while the
// late answer is pending.
func TestGlobalWasmDeadStream(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Long enough that a loaded machine returns from the abandoned request before the answer.
	const delay = 1500 * time.Millisecond
	rules := "[" + globalRule("ds", `"algorithm":"token_bucket","limit":5,"window":"1h"`, false) + "]"
	// With the script loaded, the dead request's single EVALSHA decides (and charges).
	loadScripts(t, srv)
	h := newGlobalHost(t, globalConfig(redisOpts{Timeout: "3s", FailureMode: "deny"}, rules),
		srv.SlowProxy(delay), 1)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	_, err := h.Do(ctx, globalRequest())
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), delay, "the downstream left before the answer")

	// A request started while the dead stream's answer is still on its way.
	got, elapsed := doTimed(t, h)
	require.Zero(t, got.Status, "%v", got)
	require.GreaterOrEqual(t, elapsed, delay)
	// Redis ran the dead request's script (Envoy does not cancel callouts), so it was charged.
	require.Equal(t, "3", got.Headers["x-ratelimit-remaining"])
	got, _ = doTimed(t, h)
	require.Equal(t, "2", got.Headers["x-ratelimit-remaining"])

	require.Zero(t, h.Stats().Traps, "the late answer must not trap")
	require.Empty(t, h.Stats().FailedVMs)
	require.EqualValues(t, 3, redisMetric(h, "ratelimit_redis_calls_total"))
	lat, ok := h.Histogram("ratelimit_redis_latency_us")
	require.True(t, ok)
	require.EqualValues(t, 3, lat.Count, "the dead stream's answer is a round trip of Redis too")
	requireNoRedisFailures(t, h)
	requireCleanLogs(t, h)
}

// TestGlobalWasmMetrics checks the Redis metrics a dashboard needs: callouts, failures by kind,
// and the latency histogram. A callout that cannot even be sent (the cluster is unknown to
// the host) is one failure, counted once.
func TestGlobalWasmMetrics(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rules := "[" + globalRule("m", `"algorithm":"gcra","limit":100,"window":"1h"`, false) + "]"
	cfg := globalConfig(redisOpts{FailureMode: "allow"}, rules)

	t.Run("successful callouts", func(t *testing.T) {
		h := newGlobalHost(t, cfg, srv.WebdisURL(), 2)
		const n = 10
		var slowest time.Duration
		for range n {
			_, elapsed := doTimed(t, h)
			slowest = max(slowest, elapsed)
		}
		// The first decision also loads the script (NOSCRIPT, then EVAL).
		require.EqualValues(t, n+1, redisMetric(h, "ratelimit_redis_calls_total"))
		require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_noscript_total"))
		requireNoRedisFailures(t, h)
		lat, ok := h.Histogram("ratelimit_redis_latency_us")
		require.True(t, ok, "the latency histogram is defined")
		require.EqualValues(t, n+1, lat.Count, "one sample per answer")
		require.LessOrEqual(t, lat.Max, uint64(slowest.Microseconds()), "a callout is part of its request")
	})

	t.Run("failures by kind", func(t *testing.T) {
		for _, tc := range []struct{ url, metric string }{
			{redistest.GarbageServer(t, 503, nil), "ratelimit_redis_unavailable_total"},
			{redistest.GarbageServer(t, 502, nil), "ratelimit_redis_unavailable_total"},
			{srv.SlowProxy(time.Second), "ratelimit_redis_timeouts_total"},
			{redistest.GarbageServer(t, 200, []byte(`{"EVALSHA":[false,"WRONGTYPE x"]}`)), "ratelimit_redis_errors_total"},
			{redistest.GarbageServer(t, 200, []byte(`{"EVALSHA":[0,0,1,2,1,0,0,0,0]}`)), "ratelimit_redis_malformed_total"},
			{redistest.GarbageServer(t, 200, []byte(strings.Repeat(" ", 8192))), "ratelimit_redis_malformed_total"},
			// A well-formed answer that carries another limit is not this request's answer.
			{scriptAnswerServer(t, `{"EVALSHA":[1,0,1,%s,1,999999,5,0,0,0]}`), "ratelimit_redis_malformed_total"},
			{"reset:", "ratelimit_redis_resets_total"},
		} {
			// Only the slow proxy's case needs the timeout to fire; the others answer at once,
			// and a short timeout would turn a loaded machine's late answer into a timeout
			// instead of the kind under test.
			timeout := "5s"
			if tc.metric == "ratelimit_redis_timeouts_total" {
				timeout = "100ms"
			}
			h := newGlobalHost(t, globalConfig(redisOpts{Timeout: timeout, FailureMode: "allow"}, rules), tc.url, 1)
			doTimed(t, h)
			require.EqualValuesf(t, 1, redisMetric(h, tc.metric), "%s for %s", tc.metric, tc.url)
			for _, m := range redisErrorMetrics {
				if m != tc.metric {
					require.Zerof(t, redisMetric(h, m), "%s for %s", m, tc.url)
				}
			}
			lat, _ := h.Histogram("ratelimit_redis_latency_us")
			require.EqualValuesf(t, 1, lat.Count, "a failed answer is timed too (%s)", tc.url)
		}
	})

	t.Run("callout cannot be dispatched", func(t *testing.T) {
		h := newWasm(t, cfg, wasmOptions{workers: 1, clusters: map[string]string{"other": srv.WebdisURL()},
			realTime: true}).host
		for i := range 3 {
			got, _ := doTimed(t, h)
			require.Zerof(t, got.Status, "request %d: failure_mode allow", i)
		}
		require.Zero(t, redisMetric(h, "ratelimit_redis_calls_total"), "nothing was sent")
		require.EqualValues(t, 3, redisMetric(h, "ratelimit_redis_resets_total"), "each failure counted once")
		require.Zero(t, h.Stats().Traps)
	})
}

// scriptAnswerServer answers every call with status 200 and format, whose one verb (%s) is the
// call's id as the call sent it (its body's last argument), as webdis relays a script's answer.
func scriptAnswerServer(t *testing.T, format string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, format, body[bytes.LastIndexByte(body, '/')+1:])
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Against the compiled module: a webdis cluster without hosts makes Envoy fail
// proxy_http_call at once with InternalFailure, and no answer ever comes. Each failure mode
// applies at once, the failure is counted as unavailable (not as a reset), and it feeds the
// breaker, which then stops trying.
func TestGlobalWasmClusterWithoutHosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		want int // 0: continued
	}{{"allow", 0}, {"deny", 429}, {"local", 0}} {
		t.Run(tc.mode, func(t *testing.T) {
			rules := "[" + globalRule("nohosts", `"algorithm":"fixed_window","limit":100,"window":"1h"`, false) + "]"
			h := newWasm(t, globalConfig(redisOpts{FailureMode: tc.mode, Failures: 3, Cooldown: "10m"}, rules),
				wasmOptions{workers: 1, clusters: map[string]string{"webdis": wasmhost.ClusterNoHosts}, realTime: true}).host
			for i := range 5 {
				got, elapsed := doTimed(t, h)
				require.Equalf(t, tc.want, got.Status, "request %d", i)
				require.Less(t, elapsed, time.Second, "nothing waits for an answer that never comes")
			}
			require.EqualValues(t, 3, redisMetric(h, "ratelimit_redis_unavailable_total"))
			require.Zero(t, redisMetric(h, "ratelimit_redis_resets_total"))
			require.Zero(t, redisMetric(h, "ratelimit_redis_calls_total"), "nothing was sent")
			require.EqualValues(t, 2, redisMetric(h, "ratelimit_redis_skipped_total"), "the breaker opened after 3")
			require.EqualValues(t, 1, redisMetric(h, "ratelimit_redis_breaker_open"))
			if tc.mode == "local" {
				require.EqualValues(t, 5, redisMetric(h, "ratelimit_requests_total;rule=nohosts;decision=allowed"))
			}
			require.Zero(t, h.Stats().Traps)
		})
	}
}

// TestGlobalWasmOverrides: a global rule's per-value overrides are decided in Redis with their
// own limits, by the compiled module against real webdis and Redis. Two proxies share each
// override's count, as they share the rule's.
func TestGlobalWasmOverrides(t *testing.T) {
	t.Parallel()
	// Unpartitioned, and with the rule's keys spread over 16 hash tags (redis.partitions):
	// an override's keys must stay in the slots of the rule's key sets.
	for _, parts := range []int{0, 16} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) { globalOverrides(t, parts) })
	}
}

func globalOverrides(t *testing.T, partitions int) {
	srv := redistest.Start(t)
	loadScripts(t, srv)
	rule := `{"name":"tiers","key":[{"source":"header","name":"x-user"}],"scope":"global",
		"algorithm":"token_bucket","limit":2,"window":"1h",
		"overrides":[{"exact":"gold","limit":4},{"prefix":"svc-","unlimited":true}]}`
	cfg := globalConfig(redisOpts{Timeout: "5s", FailureMode: "deny", Partitions: partitions}, "["+rule+"]")
	proxies := [2]*wasmhost.Host{newGlobalHost(t, cfg, srv.WebdisURL(), 2), newGlobalHost(t, cfg, srv.WebdisURL(), 2)}
	admitted := func(user string, n int) int {
		ok := 0
		for i := range n {
			o, _ := doTimed(t, proxies[i%2], [2]string{"x-user", user})
			if o.Status == 0 {
				ok++
			} else {
				require.Equal(t, 429, o.Status)
			}
		}
		return ok
	}
	require.Equal(t, 2, admitted("plain", 6), "an ordinary key has the rule's limit")
	require.Equal(t, 4, admitted("gold", 8), "the exact override admits its own limit, across both proxies")
	require.Equal(t, 10, admitted("svc-a", 10), "an unlimited override is never limited")
	// A key's state belongs to the rule and the key: the override decides the rule's own key
	// for "gold", under its parameters.
	if partitions == 0 {
		require.EqualValues(t, 1, srv.MustDo("EXISTS", expectedKey("tiers", "gold")))
	}
	for _, p := range proxies {
		requireNoRedisFailures(t, p)
		requireCleanLogs(t, p)
	}
}

// realTimeDriver runs steps on a module on real time, each under callDeadline and on a VM
// that must not fail, as doTimed does (filtertest.Driver). Its steps cannot wait: the instant
// is the host's own.
type realTimeDriver struct{ *wasmDriver }

// Do runs s now.
func (d realTimeDriver) Do(t *testing.T, _ time.Time, s step) outcome {
	t.Helper()
	require.Zero(t, s.At, "a step on real time cannot wait")
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	res, err := d.host.Do(ctx, d.request(s))
	require.NoError(t, err, "the request must complete within %v", callDeadline)
	require.False(t, res.Failed, "the VM failed: %v", res.Local)
	return outcomeOf(res)
}

// TestGlobalAnswersWasm runs filtertest.AnswerCases against the compiled module, one worker,
// whose webdis is a stand-in answering every call with the case's answer (package filter runs
// them natively).
func TestGlobalAnswersWasm(t *testing.T) {
	t.Parallel()
	for _, c := range filtertest.AnswerCases {
		t.Run(c.Name, func(t *testing.T) {
			d := realTimeDriver{newWasm(t, c.Config, wasmOptions{workers: 1,
				clusters: map[string]string{"webdis": scriptAnswerServer(t, c.Answer)}, realTime: true})}
			filtertest.Run(t, d, filtertest.Scenario{Name: c.Name, Config: c.Config, Steps: c.Steps})
			require.Zero(t, d.host.Stats().Traps)
		})
	}
}
