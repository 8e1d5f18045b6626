package algorithms

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func newTestAdaptive(t testing.TB) *Adaptive {
	t.Helper()
	a, err := NewAdaptive(Config{
		Algorithm: AlgAdaptive, Limit: 100, MinLimit: 10, MaxLimit: 200, Window: time.Second,
		TargetLatency: 100 * ms, ErrorThreshold: 0.05, AdjustInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var (
	good      = Signals{Requests: 100, Errors: 1, LatencySum: 100 * 20 * ms}
	errorful  = Signals{Requests: 100, Errors: 6, LatencySum: 100 * 20 * ms}
	slow      = Signals{Requests: 100, Errors: 0, LatencySum: 100 * 101 * ms}
	quiet     = Signals{Requests: 3, Errors: 3, LatencySum: 3 * time.Second}
	borderErr = Signals{Requests: 100, Errors: 5, LatencySum: 100 * 100 * ms} // exactly at both thresholds
)

func TestAdaptiveUnhealthy(t *testing.T) {
	a := newTestAdaptive(t)
	for _, tc := range []struct {
		s    Signals
		want bool
	}{
		{good, false}, {errorful, true}, {slow, true}, {quiet, false}, {borderErr, false},
		{Signals{}, false}, {Signals{Requests: -5, Errors: 10}, false},
		{Signals{Requests: math.MaxInt64, Errors: math.MaxInt64}, true},
	} {
		if got := a.unhealthy(max(tc.s.Requests, 0), max(tc.s.Errors, 0), max(int64(tc.s.LatencySum), 0)); got != tc.want {
			t.Errorf("Unhealthy(%+v) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestAdaptiveController(t *testing.T) {
	a := newTestAdaptive(t)
	var ctrl []byte
	now := t0
	tick := func(s Signals) int64 {
		now += int64(time.Second)
		limit, out := a.Update(ctrl, s, now)
		ctrl = out
		if limit != a.CurrentLimit(ctrl) {
			t.Fatalf("Update returned %d, CurrentLimit reads %d", limit, a.CurrentLimit(ctrl))
		}
		return limit
	}
	if got := a.CurrentLimit(nil); got != 100 {
		t.Fatalf("fresh controller limit %d, want Limit (100)", got)
	}
	// The first Update of a fresh controller only starts the interval.
	if limit := tick(good); limit != 100 {
		t.Fatalf("first tick: %d", limit)
	}
	// Healthy: +MaxLimit/20 = +10 per interval, up to 200.
	want := []int64{110, 120, 130, 140, 150, 160, 170, 180, 190, 200, 200}
	for i, w := range want {
		if got := tick(good); got != w {
			t.Fatalf("healthy tick %d: limit %d, want %d", i, got, w)
		}
	}
	// Unhealthy: ×0.9 per interval, floored, down to 10.
	want = []int64{180, 162, 145, 130, 117}
	for i, w := range want {
		s := errorful
		if i%2 == 1 {
			s = slow
		}
		if got := tick(s); got != w {
			t.Fatalf("unhealthy tick %d: limit %d, want %d", i, got, w)
		}
	}
	for i := 0; i < 50; i++ {
		tick(errorful)
	}
	if got := tick(errorful); got != 10 {
		t.Fatalf("limit after a long outage: %d, want MinLimit 10", got)
	}
	// Quiet intervals count as healthy: the limit recovers.
	if got := tick(quiet); got != 20 {
		t.Fatalf("quiet tick: %d, want 20", got)
	}
}

// TestAdaptiveAccumulates checks the multi-worker design: several workers add their signals
// to the same state, and only one adjustment per AdjustInterval happens, on their sum.
func TestAdaptiveAccumulates(t *testing.T) {
	a := newTestAdaptive(t)
	var ctrl []byte
	now := t0
	_, ctrl = a.Update(ctrl, Signals{}, now) // starts the interval
	// Four workers tick within the interval, each healthy on its own share except that the
	// sum of their errors is over the threshold: 4 × (25 requests, 2 errors) = 8%.
	share := Signals{Requests: 25, Errors: 2, LatencySum: 25 * 10 * ms}
	for w := 0; w < 3; w++ {
		now += int64(100 * ms)
		var limit int64
		limit, ctrl = a.Update(ctrl, share, now)
		if limit != 100 {
			t.Fatalf("adjusted before the interval ended: %d", limit)
		}
	}
	now = t0 + int64(time.Second)
	limit, ctrl := a.Update(ctrl, share, now)
	if limit != 90 {
		t.Fatalf("limit %d after an unhealthy interval (8%% errors summed over workers), want 90", limit)
	}
	// A stale worker (clock behind) only accumulates.
	limit, ctrl = a.Update(ctrl, errorful, now-int64(time.Second))
	if limit != 90 {
		t.Fatalf("a stale Update adjusted the limit: %d", limit)
	}
	// Its 6 errors in 100 requests plus 10 clean requests: 6/110 > 5%.
	limit, _ = a.Update(ctrl, Signals{Requests: 10}, now+int64(time.Second))
	if limit != 81 {
		t.Fatalf("the stale worker's signals were lost: limit %d, want 81", limit)
	}
}

// TestAdaptiveBounds drives the controller with random signals and checks that the limit never
// leaves [MinLimit, MaxLimit], falls under bad signals and recovers under good ones.
func TestAdaptiveBounds(t *testing.T) {
	a := newTestAdaptive(t)
	r := rand.New(rand.NewPCG(5, 5))
	var ctrl []byte
	now := t0
	var limit int64
	for phase := 0; phase < 40; phase++ {
		bad := phase%2 == 0
		start := a.CurrentLimit(ctrl)
		for i := 0; i < 30; i++ {
			now += r.Int64N(int64(2 * time.Second))
			s := Signals{Requests: r.Int64N(500), LatencySum: time.Duration(r.Int64N(int64(10 * time.Second)))}
			if bad {
				s.Errors = s.Requests/10 + 1
				s.Requests = max(s.Requests, 20)
			} else {
				s.Errors = 0
				s.LatencySum = time.Duration(s.Requests) * ms
			}
			limit, ctrl = a.Update(ctrl, s, now)
			if limit < 10 || limit > 200 {
				t.Fatalf("limit %d outside [10, 200]", limit)
			}
		}
		end := a.CurrentLimit(ctrl)
		if bad && end >= start && start > 10 {
			t.Fatalf("phase %d: limit did not fall under bad signals: %d -> %d", phase, start, end)
		}
		if !bad && end <= start && start < 200 {
			t.Fatalf("phase %d: limit did not recover under good signals: %d -> %d", phase, start, end)
		}
	}
	// Garbage controller state decodes as fresh, and a hostile limit in it is clamped.
	bogus := make([]byte, ctrlSize)
	bogus[0] = verAdaptiveCtrl
	put64(bogus[1:], math.MaxInt64)
	if got := a.CurrentLimit(bogus); got != 200 {
		t.Fatalf("hostile limit read as %d, want clamped to 200", got)
	}
	if got := a.CurrentLimit([]byte{1, 2}); got != 100 {
		t.Fatalf("garbage state read as %d, want Limit", got)
	}
}

// TestSatAdd checks the saturating sum the controller accumulates signals with.
func TestSatAdd(t *testing.T) {
	if got := satAdd(math.MaxInt64-1, 5); got != math.MaxInt64 {
		t.Fatalf("satAdd near the top = %d", got)
	}
	if got := satAdd(1, -3); got != 1 {
		t.Fatalf("satAdd of a negative = %d", got)
	}
	if got := satAdd(5, 7); got != 12 {
		t.Fatalf("satAdd = %d", got)
	}
}

// TestAdaptiveAdmissionVaryingLimit admits under a limit that changes between calls: every
// admission respects the limit in force (the estimate plus n is within it), so each aligned
// window holds at most the largest limit used in it, and RetryAfter is exact under a steady
// limit.
func TestAdaptiveAdmissionVaryingLimit(t *testing.T) {
	a := newTestAdaptive(t)
	r := rand.New(rand.NewPCG(8, 8))
	c := Config{Algorithm: AlgAdaptive, Limit: 100, Window: time.Second}
	state := make([]byte, 0, a.StateSize())
	perWindow := map[int64]int64{}
	maxLimit := map[int64]int64{}
	for i, cl := range randomCalls(r, c, 20000, 0) {
		limit := 5 + r.Int64N(250) // also outside [10, 200]: clamped
		used := min(max(limit, 10), 200)
		before := append([]byte(nil), state...)
		var d Decision
		d, state = a.AllowNLimit(state, cl.at, cl.n, limit)
		if d.Limit != used || d.Remaining < 0 || d.Remaining > used {
			t.Fatalf("call %d: %+v under limit %d", i, d, used)
		}
		w := cl.at - cl.at%int64(time.Second)
		maxLimit[w] = max(maxLimit[w], used)
		if d.Allowed {
			perWindow[w] += cl.n
			if perWindow[w] > maxLimit[w] {
				t.Fatalf("call %d: %d admitted in a window whose largest limit is %d", i, perWindow[w], maxLimit[w])
			}
		} else if !d.Unsatisfiable() {
			if d2, _ := a.AllowNLimit(append([]byte(nil), before...), cl.at+int64(d.RetryAfter), cl.n, limit); !d2.Allowed {
				t.Fatalf("call %d: denied again after RetryAfter", i)
			}
		}
	}
}
