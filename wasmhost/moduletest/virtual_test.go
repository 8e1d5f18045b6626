package moduletest

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// The tests in this file run the compiled module on the host's virtual clock
// (wasmhost.VirtualClock): proxy_on_tick on every worker VM, callout timeouts and upstream
// delays all follow a clock the test advances, so the shaping queue, the adaptive controller
// and the global failure modes are checked with exact instants and exact trajectories, and no
// result depends on how busy the machine is. One short real-time smoke test of each remains
// (TestShapeWasmBurstLeavesAtRate, TestAdaptiveWasmJudgesOnlyTheUpstream,
// TestGlobalWasmFailureModes' "allow" row), to show the same code works on real timers.

// virtualHost starts the module with workers VMs on a fresh virtual clock that reads t0.
func virtualHost(t *testing.T, config string, workers int, clusters map[string]string) (*wasmhost.Host, *wasmhost.VirtualClock) {
	t.Helper()
	clock := wasmhost.NewVirtualClock(t0)
	d := newWasm(t, config, wasmOptions{workers: workers, clock: clock, clusters: clusters})
	return d.host, clock
}

// inFlight is a set of requests sent at once, whose results arrive as the clock moves.
type inFlight struct {
	wg       sync.WaitGroup
	res      []*wasmhost.Result
	errs     []error
	returned atomic.Int64
}

// send starts every request of reqs on its own goroutine and returns at once.
func send(h *wasmhost.Host, reqs []wasmhost.Request) *inFlight {
	f := &inFlight{res: make([]*wasmhost.Result, len(reqs)), errs: make([]error, len(reqs))}
	for i, r := range reqs {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			f.res[i], f.errs[i] = h.Do(ctx, r)
			f.returned.Add(1)
		}()
	}
	return f
}

// wait waits for every request and fails on an error.
func (f *inFlight) wait(t *testing.T) []*wasmhost.Result {
	t.Helper()
	f.wg.Wait()
	for i, err := range f.errs {
		require.NoErrorf(t, err, "request %d", i)
	}
	return f.res
}

// sendQueuedOneByOne sends k requests to a host whose rule shapes them, one after another on
// the workers in turn, each decided (passed at once or queued by rule) before the next is
// sent, so that no compare-and-swap race can make the outcome depend on scheduling; the first
// must pass and the other k-1 be queued.
func sendQueuedOneByOne(t *testing.T, h *wasmhost.Host, rule string, k, workers int) []*inFlight {
	t.Helper()
	queued := "ratelimit_shape_queued_total;rule=" + rule
	var flights []*inFlight
	for i := range k {
		before, _ := h.Metric(queued)
		f := send(h, []wasmhost.Request{{Worker: i % workers, Method: "GET", Path: "/", Authority: "example.test",
			Upstream: &wasmhost.UpstreamResponse{Status: 200}}})
		eventually(t, "request decided", func() bool {
			q, _ := h.Metric(queued)
			return f.returned.Load() == 1 || q == before+1
		})
		flights = append(flights, f)
	}
	require.EqualValues(t, k-1, hostMetric(t, h, queued))
	return flights
}

// eventually polls cond (a state the host reaches without the clock moving, such as "every
// request has been decided") for up to a minute of real time; it states no timing.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, time.Minute, time.Millisecond, what)
}

// A burst of K requests at one instant, spread over four worker VMs, to a rule shaping to 20
// per second (one slot every 50 ms; the filter ticks every 12 ms, a quarter of the emission
// interval in whole milliseconds): the first passes at once, and request i leaves on the first
// tick at or after its slot i x 50 ms, on one schedule that all workers share. Every release
// instant is exact: 0, 60, 108, 156, 204, 252, 300, 360, 408, 456 ms, and request i (on worker
// i mod 4) is the one released at the i-th.
func TestShapeVirtualBurstLeavesAtRate(t *testing.T) {
	t.Parallel()
	const workers, k = 4, 10
	h, clock := virtualHost(t, shapeConfig("burst", 20, k, time.Second), workers, nil)
	// The requests arrive at one instant, one after another, each on the next worker in turn
	// (each decided before the next arrives, so that no compare-and-swap race can make the
	// outcome depend on scheduling): the first passes, the others are queued.
	flights := sendQueuedOneByOne(t, h, "burst", k, workers)
	clock.Advance(time.Second)
	var released []time.Duration
	perWorker := map[int]int{}
	for i, f := range flights {
		r := f.wait(t)[0]
		require.Truef(t, r.Continued && r.Local == nil, "request %d: %+v", i, r.Local)
		released = append(released, r.ContinuedAt.Sub(t0))
		perWorker[r.Worker]++
	}
	want := make([]time.Duration, k)
	for i := range want {
		slot := time.Duration(i) * 50 * time.Millisecond
		tick := 12 * time.Millisecond
		want[i] = (slot + tick - 1) / tick * tick
	}
	require.Equal(t, want, released)
	require.Len(t, perWorker, workers)
	// The delay histogram saw each queued request at its release instant, in whole ms.
	hist, ok := h.Histogram("ratelimit_shape_delay_ms;rule=burst")
	require.True(t, ok)
	delays := slices.Clone(hist.Values)
	slices.Sort(delays)
	var wantMS []uint64
	for _, d := range want[1:] {
		wantMS = append(wantMS, uint64(d/time.Millisecond))
	}
	require.Equal(t, wantMS, delays)
	require.EqualValues(t, k-1, hostMetric(t, h, "ratelimit_shape_released_total;rule=burst"))
	require.Zero(t, hostMetric(t, h, "ratelimit_shape_dropped_total;rule=burst"))
	// Every worker ticked once per 12 ms of virtual time: 83 ticks in a second.
	require.Equal(t, []int64{83, 83, 83, 83}, h.Stats().Ticks)
	require.Zero(t, h.Stats().Traps)
	requireNoGuestErrors(t, h)
}

// Both bounds of the shaping queue, at one instant: with burst 10 and max_delay 450 ms, 20
// requests per second, a burst of 15 admits the first at once and queues the next 9 (the last
// of them waits 450 ms, exactly max_delay); the 11th would wait 500 ms and is denied at once
// with Retry-After, as are the rest. With burst 2 the queue holds 2, and the 4th request is
// denied at once although max_delay would allow it.
func TestShapeVirtualBoundsDenyAtOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		burst    int
		maxDelay time.Duration
		queued   int
	}{
		{name: "max_delay", burst: 10, maxDelay: 450 * time.Millisecond, queued: 9},
		{name: "burst", burst: 2, maxDelay: 5 * time.Second, queued: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const k = 15
			h, clock := virtualHost(t, shapeConfig("bound", 20, c.burst, c.maxDelay), 2, nil)
			// One after another at one instant (each decided before the next arrives): a denied
			// request returns at once, a queued one waits for a tick.
			var flights []*inFlight
			for i := range k {
				before, _ := h.Metric("ratelimit_shape_queued_total;rule=bound")
				f := send(h, []wasmhost.Request{{Worker: i % 2, Path: "/", Upstream: &wasmhost.UpstreamResponse{Status: 200}}})
				eventually(t, "request decided", func() bool {
					q, _ := h.Metric("ratelimit_shape_queued_total;rule=bound")
					return f.returned.Load() == 1 || q == before+1
				})
				flights = append(flights, f)
			}
			require.EqualValues(t, c.queued, hostMetric(t, h, "ratelimit_shape_queued_total;rule=bound"))
			clock.Advance(10 * time.Second)
			passed, denied := 0, 0
			var last time.Duration
			for _, f := range flights {
				r := f.wait(t)[0]
				if r.Local != nil {
					require.Equal(t, 429, r.Local.Status)
					require.NotEmpty(t, headerOf(r.Local.Headers, "retry-after"))
					denied++
					continue
				}
				passed++
				last = max(last, r.ContinuedAt.Sub(t0))
			}
			require.Equal(t, 1+c.queued, passed)
			require.Equal(t, k-1-c.queued, denied)
			// The last queued request leaves on the first 12 ms tick at or after its slot.
			slot := time.Duration(c.queued) * 50 * time.Millisecond
			require.Equal(t, (slot+11*time.Millisecond)/(12*time.Millisecond)*(12*time.Millisecond), last)
			requireNoGuestErrors(t, h)
		})
	}
}

// headerOf returns the first value of a header in pairs.
func headerOf(pairs [][2]string, name string) string {
	for _, kv := range pairs {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

// The adaptive limit follows the upstream's health, in virtual time with exact steps. The
// rule moves between 12 and 40 per 200 ms window, adjusted every 200 ms interval by
// floor(limit x 0.9) when unhealthy and +2 (max_limit/20) when healthy; the filter ticks every
// 50 ms on each of four workers. Load: every 50 ms, 8 requests at once, spread round robin
// (32 per interval in all, 8 per worker, fewer than the 10 samples the controller needs: the
// limit can only move if the workers' signals are added up). The upstream answers at once
// (healthy) or after 30 ms against a 20 ms target (slow), or answers 503 at once (failing).
func TestAdaptiveVirtualFollowsTheUpstream(t *testing.T) {
	t.Parallel()
	const (
		gauge    = "ratelimit_adaptive_limit;rule=ad"
		workers  = 4
		perRound = 8
	)
	h, clock := virtualHost(t, `{"rules":[{"name":"ad","algorithm":"adaptive","window":"200ms",
		"adaptive":{"min_limit":12,"max_limit":40,"target_latency":"20ms","error_threshold":0.2,"interval":"200ms"}}]}`, workers, nil)
	limit := func() int64 { return hostMetric(t, h, gauge) }
	require.EqualValues(t, 40, limit())
	// round sends perRound requests at 5 ms past the current 50 ms step, lets the upstream answer
	// after delay, and moves the clock to the next step, which fires the ticks at it.
	round := func(delay time.Duration, status int) {
		t.Helper()
		step := clock.Now().Sub(t0) / (50 * time.Millisecond) * (50 * time.Millisecond)
		clock.AdvanceTo(t0.Add(step + 5*time.Millisecond))
		// The requests are decided one after another, each on the next worker in turn, so
		// that which of them the limit admits, and so each worker's share of the signals, is
		// the same in every run. A denied request returns at once; an admitted one waits for
		// its upstream on one timer.
		var flights []*inFlight
		for i := range perRound {
			before := clock.Pending()
			f := send(h, []wasmhost.Request{{Worker: i % workers, Path: "/",
				Upstream: &wasmhost.UpstreamResponse{Status: status, Delay: delay}}})
			eventually(t, "request decided", func() bool { return f.returned.Load() == 1 || clock.Pending() > before })
			flights = append(flights, f)
		}
		clock.Advance(delay)
		for _, f := range flights {
			f.wait(t)
		}
		clock.AdvanceTo(t0.Add(step + 50*time.Millisecond))
	}
	// interval runs the 4 rounds of one 200 ms interval and returns the limit at its end.
	interval := func(delay time.Duration, status int) int64 {
		for range 4 {
			round(delay, status)
		}
		return limit()
	}
	var healthy, slow, healed, failing []int64
	for range 5 {
		healthy = append(healthy, interval(0, 200))
	}
	for range 11 {
		slow = append(slow, interval(30*time.Millisecond, 200))
	}
	for range 16 {
		healed = append(healed, interval(0, 200))
	}
	for range 4 {
		failing = append(failing, interval(0, 503))
	}
	t.Logf("limit at the end of each interval: healthy %v, slow %v, healed %v, failing %v", healthy, slow, healed, failing)
	// The controller's interval starts at its first update (the first tick, at 50 ms), so it
	// adjusts at 250, 450, ... ms and judges the 200 ms before: three rounds of the test's
	// previous interval and the first of the current one. A change of health therefore shows
	// one interval late: the first slow interval still reads 40, then x0.9 per interval,
	// floored, down to min_limit 12 (40 36 32 28 25 22 19 17 15 13 12; 13 x 0.9 = 11.7 is
	// clamped to 12). Healed, +2 per interval back to 40; the first healed reading already
	// rises, because the interval judged then holds only three slow rounds, and under a limit
	// of 12 they were fewer than the 10 samples it takes to call an interval unhealthy.
	require.Equal(t, []int64{40, 40, 40, 40, 40}, healthy)
	require.Equal(t, []int64{40, 36, 32, 28, 25, 22, 19, 17, 15, 13, 12}, slow)
	require.Equal(t, []int64{14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 40, 40}, healed)
	// Failing: every answer a 503 (100% > the 20% threshold), at once; the same fall, one
	// interval late.
	require.Equal(t, []int64{40, 36, 32, 28}, failing)
	require.Positive(t, hostMetric(t, h, "ratelimit_requests_total;rule=ad;decision=denied"), "a lowered limit sheds load")
	require.Zero(t, h.Stats().Traps)
	requireNoGuestErrors(t, h)
}
