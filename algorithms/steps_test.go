package algorithms

import (
	"testing"
	"time"
)

// t0 is a realistic Unix instant that is a whole number of hours, so clock-aligned windows of
// 1s, 1min and 1h all start at it.
const t0 = int64(1_699_999_200) * int64(time.Second)

// step is one call of a step table: at t0+at, n events, and the full expected decision.
type step struct {
	at      time.Duration
	n       int64
	allowed bool
	rem     int64
	retry   time.Duration
	reset   time.Duration
	delay   time.Duration
}

func mustNew(t testing.TB, c Config) Limiter {
	t.Helper()
	l, err := New(c)
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	return l
}

// runSteps feeds the steps to l with one state buffer and checks every decision field.
func runSteps(t *testing.T, l Limiter, steps []step) {
	t.Helper()
	var state []byte
	for i, s := range steps {
		var d Decision
		d, state = l.AllowN(state, t0+int64(s.at), s.n)
		want := Decision{Allowed: s.allowed, Remaining: s.rem, RetryAfter: s.retry, ResetAfter: s.reset, Delay: s.delay}
		got := d
		got.Limit = 0
		if got != want {
			t.Errorf("step %d (at %v, n=%d):\n got %+v\nwant %+v", i, s.at, s.n, got, want)
		}
	}
}

const ms = time.Millisecond

func TestStepsTokenBucket(t *testing.T) {
	// 10 per second, burst 5: one token every 100ms.
	runSteps(t, mustNew(t, Config{Algorithm: AlgTokenBucket, Limit: 10, Window: time.Second, Burst: 5}), []step{
		{at: 0, n: 1, allowed: true, rem: 4, reset: 100 * ms},
		{at: 0, n: 4, allowed: true, rem: 0, reset: 500 * ms},
		{at: 0, n: 1, retry: 100 * ms, reset: 500 * ms},
		{at: 50 * ms, n: 1, retry: 50 * ms, reset: 450 * ms},
		{at: 100 * ms, n: 1, allowed: true, rem: 0, reset: 500 * ms},
		{at: 350 * ms, n: 3, rem: 2, retry: 50 * ms, reset: 250 * ms},
		{at: 400 * ms, n: 3, allowed: true, rem: 0, reset: 500 * ms},
		{at: 10 * time.Second, n: 6, rem: 5},  // n > burst: unsatisfiable
		{at: 10 * time.Second, n: 0, rem: 5},  // n <= 0: unsatisfiable
		{at: 10 * time.Second, n: -1, rem: 5}, // n <= 0: unsatisfiable
		{at: 10 * time.Second, n: 5, allowed: true, rem: 0, reset: 500 * ms},
		{at: 10*time.Second + 250*ms, n: 2, allowed: true, rem: 0, reset: 450 * ms}, // 2.5 tokens
		{at: 10*time.Second + 250*ms, n: 1, retry: 50 * ms, reset: 450 * ms},
	})
	// 3 per second: the refill interval is 333333333.33ns, kept exact.
	runSteps(t, mustNew(t, Config{Algorithm: AlgTokenBucket, Limit: 3, Window: time.Second, Burst: 1}), []step{
		{at: 0, n: 1, allowed: true, rem: 0, reset: 333333334},
		{at: 333333333, n: 1, retry: 1, reset: 1},
		{at: 333333334, n: 1, allowed: true, rem: 0, reset: 333333334},
		{at: 1333333334, n: 1, allowed: true, rem: 0, reset: 333333334}, // full after 1s idle
	})
}

func TestStepsLeakyBucketMeter(t *testing.T) {
	runSteps(t, mustNew(t, Config{Algorithm: AlgLeakyBucket, Limit: 10, Window: time.Second, Burst: 5}), []step{
		{at: 0, n: 5, allowed: true, rem: 0, reset: 500 * ms},
		{at: 0, n: 1, retry: 100 * ms, reset: 500 * ms},
		{at: 250 * ms, n: 2, allowed: true, rem: 0, reset: 450 * ms}, // level 2.5 + 2
		{at: 250 * ms, n: 1, retry: 50 * ms, reset: 450 * ms},
		{at: 700 * ms, n: 1, allowed: true, rem: 4, reset: 100 * ms}, // drained to 0
		{at: 700 * ms, n: 6, rem: 4, reset: 100 * ms},                // n > capacity
	})
}

func TestStepsLeakyBucketShaper(t *testing.T) {
	// 10 per second (one every 100ms), queue of 5, delays up to 300ms.
	runSteps(t, mustNew(t, Config{Algorithm: AlgLeakyBucket, Limit: 10, Window: time.Second, Burst: 5, MaxDelay: 300 * ms}), []step{
		{at: 0, n: 1, allowed: true, rem: 3, reset: 200 * ms},
		{at: 0, n: 1, allowed: true, rem: 2, reset: 300 * ms, delay: 100 * ms},
		{at: 0, n: 2, allowed: true, rem: 0, reset: 500 * ms, delay: 300 * ms},
		{at: 0, n: 1, rem: 0, retry: 100 * ms, reset: 500 * ms},
		{at: 100 * ms, n: 1, allowed: true, rem: 0, reset: 500 * ms, delay: 300 * ms},
		{at: time.Second, n: 5, allowed: true, rem: 3, reset: 200 * ms},          // idle enough: passes at once
		{at: time.Second, n: 6, rem: 3, reset: 200 * ms},                         // n > capacity
		{at: time.Second + 50*ms, n: 4, rem: 3, retry: 50 * ms, reset: 150 * ms}, // would wait 350ms
		{at: time.Second + 50*ms, n: 3, allowed: true, rem: 0, reset: 450 * ms, delay: 250 * ms},
	})
	// 3 per second: release times advance by exactly 1/3 s; three of them sum to 1s.
	runSteps(t, mustNew(t, Config{Algorithm: AlgLeakyBucket, Limit: 3, Window: time.Second, MaxDelay: time.Second}), []step{
		{at: 0, n: 1, allowed: true, rem: 3, reset: 0},
		{at: 0, n: 1, allowed: true, rem: 2, reset: 333333334, delay: 333333334},
		{at: 0, n: 1, allowed: true, rem: 1, reset: 666666667, delay: 666666667},
		{at: 0, n: 1, allowed: true, rem: 0, reset: time.Second, delay: time.Second},
		{at: 0, n: 1, rem: 0, retry: 333333334, reset: time.Second},
		{at: 333333334, n: 1, allowed: true, rem: 0, reset: time.Second, delay: time.Second},
	})
}

func TestStepsFixedWindow(t *testing.T) {
	runSteps(t, mustNew(t, Config{Algorithm: AlgFixedWindow, Limit: 3, Window: time.Second}), []step{
		{at: 0, n: 1, allowed: true, rem: 2, reset: time.Second},
		{at: 500 * ms, n: 2, allowed: true, rem: 0, reset: 500 * ms},
		{at: 999999999, n: 1, rem: 0, retry: 1, reset: 1},
		{at: time.Second, n: 3, allowed: true, rem: 0, reset: time.Second},
		{at: time.Second, n: 4, rem: 0, reset: time.Second}, // n > limit
		{at: 5*time.Second + 1, n: 1, allowed: true, rem: 2, reset: time.Second - 1},
	})
}

// TestFixedWindowBoundaryBurst demonstrates the documented weakness: 2×Limit events pass
// within 2ns around a window boundary.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	l := mustNew(t, Config{Algorithm: AlgFixedWindow, Limit: 100, Window: time.Minute})
	var state []byte
	var d Decision
	admitted := 0
	for _, at := range []int64{t0 + int64(time.Minute) - 1, t0 + int64(time.Minute)} {
		for i := 0; i < 150; i++ {
			if d, state = l.AllowN(state, at, 1); d.Allowed {
				admitted++
			}
		}
	}
	if admitted != 200 {
		t.Fatalf("admitted %d in 2ns across the boundary, want 2×100", admitted)
	}
}

func TestStepsSlidingWindowCounter(t *testing.T) {
	// 10 per second; a slice is 1µs.
	runSteps(t, mustNew(t, Config{Algorithm: AlgSlidingWindow, Limit: 10, Window: time.Second}), []step{
		{at: 0, n: 10, allowed: true, rem: 0, reset: 2 * time.Second},
		{at: 500 * ms, n: 1, retry: 600 * ms, reset: 1500 * ms},          // next window, when prev's weight is 0.9
		{at: 1100 * ms, n: 1, allowed: true, rem: 0, reset: 1900 * ms},   // 10×0.9 + 1
		{at: 1100 * ms, n: 1, retry: 100 * ms, reset: 1900 * ms},         // 10×0.8 + 1 + 1 at 1.2s
		{at: 1500 * ms, n: 5, rem: 4, retry: 100 * ms, reset: 1500 * ms}, // 10×0.5 + 1 = 6
		{at: 1600 * ms, n: 5, allowed: true, rem: 0, reset: 1400 * ms},   // 10×0.4 + 1 + 5
		{at: 3500 * ms, n: 10, allowed: true, rem: 0, reset: 1500 * ms},  // both windows gone
		{at: 3500 * ms, n: 11, rem: 0, reset: 1500 * ms},                 // n > limit
		{at: 5 * time.Second, n: 1, allowed: true, rem: 9, reset: 2 * time.Second},
		{at: 5500 * ms, n: 10, rem: 9, retry: 1500 * ms, reset: 1500 * ms}, // n == limit: wait for 7s
		{at: 7 * time.Second, n: 10, allowed: true, rem: 0, reset: 2 * time.Second},
	})
}

func TestStepsSlidingWindowLog(t *testing.T) {
	runSteps(t, mustNew(t, Config{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 3, Window: time.Second}), []step{
		{at: 0, n: 1, allowed: true, rem: 2, reset: time.Second},
		{at: 100 * ms, n: 1, allowed: true, rem: 1, reset: time.Second},
		{at: 200 * ms, n: 1, allowed: true, rem: 0, reset: time.Second},
		{at: 300 * ms, n: 1, rem: 0, retry: 700 * ms, reset: 900 * ms},
		{at: 300 * ms, n: 2, rem: 0, retry: 800 * ms, reset: 900 * ms}, // the 2nd oldest must go
		{at: 999999999, n: 1, rem: 0, retry: 1, reset: 200*ms + 1},
		{at: time.Second, n: 1, allowed: true, rem: 0, reset: time.Second},
		{at: 1100 * ms, n: 2, rem: 1, retry: 100 * ms, reset: 900 * ms},
		{at: 1200 * ms, n: 2, allowed: true, rem: 0, reset: time.Second},
		{at: 1200 * ms, n: 4, rem: 0, reset: time.Second}, // n > limit
		{at: 5 * time.Second, n: 3, allowed: true, rem: 0, reset: time.Second},
	})
	// An 8-byte-delta layout (window above 2^32 ns) behaves the same.
	runSteps(t, mustNew(t, Config{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 2, Window: time.Hour}), []step{
		{at: 0, n: 1, allowed: true, rem: 1, reset: time.Hour},
		{at: 30 * time.Minute, n: 1, allowed: true, rem: 0, reset: time.Hour},
		{at: 45 * time.Minute, n: 1, rem: 0, retry: 15 * time.Minute, reset: 45 * time.Minute},
		{at: time.Hour, n: 1, allowed: true, rem: 0, reset: time.Hour},
	})
}

func TestStepsGCRA(t *testing.T) {
	// T = 100ms, burst 5: tolerance 500ms.
	runSteps(t, mustNew(t, Config{Algorithm: AlgGCRA, Limit: 10, Window: time.Second, Burst: 5}), []step{
		{at: 0, n: 1, allowed: true, rem: 4, reset: 100 * ms},
		{at: 0, n: 4, allowed: true, rem: 0, reset: 500 * ms},
		{at: 0, n: 1, rem: 0, retry: 100 * ms, reset: 500 * ms},
		{at: 250 * ms, n: 1, allowed: true, rem: 1, reset: 350 * ms},
		{at: 250 * ms, n: 2, rem: 1, retry: 50 * ms, reset: 350 * ms},
		{at: 10 * time.Second, n: 6, rem: 5},
		{at: 10 * time.Second, n: 5, allowed: true, rem: 0, reset: 500 * ms},
	})
	// Burst 1 (the default with limit 1): testing the incremented TAT without the last cell's T (see gcra.go) would deny every request.
	runSteps(t, mustNew(t, Config{Algorithm: AlgGCRA, Limit: 1, Window: time.Second}), []step{
		{at: 0, n: 1, allowed: true, rem: 0, reset: time.Second},
		{at: 0, n: 1, rem: 0, retry: time.Second, reset: time.Second},
		{at: time.Second - 1, n: 1, rem: 0, retry: 1, reset: 1},
		{at: time.Second, n: 1, allowed: true, rem: 0, reset: time.Second},
	})
}

func TestStepsAdaptiveAdmission(t *testing.T) {
	a, err := NewAdaptive(Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 2, Window: time.Second, ErrorThreshold: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	var state []byte
	var d Decision
	check := func(at time.Duration, n, limit int64, allowed bool, rem int64) {
		t.Helper()
		d, state = a.AllowNLimit(state, t0+int64(at), n, limit)
		if d.Allowed != allowed || d.Remaining != rem || d.Limit != min(max(limit, 2), 10) {
			t.Fatalf("at %v n=%d limit=%d: got %+v, want allowed=%v remaining=%d", at, n, limit, d, allowed, rem)
		}
	}
	check(0, 3, 5, true, 2)
	check(0, 2, 5, true, 0)
	check(0, 1, 5, false, 0)
	check(0, 1, 8, true, 2) // a raised limit applies at once, counts carry over
	check(0, 1, 4, false, 0)
	check(0, 1, 100, true, 3)                               // clamped to MaxLimit (10)
	check(0, 1, 0, false, 0)                                // clamped to MinLimit (2): 8 counted already
	d, state = a.AllowN(state, t0+int64(2*time.Second), 10) // AllowN uses the recorded limit (2): n=10 > 2
	if !d.Unsatisfiable() || d.Limit != 2 {
		t.Fatalf("AllowN under the recorded limit: %+v", d)
	}
	d, _ = a.AllowN(nil, t0, 10) // a fresh key uses Limit
	if !d.Allowed || d.Limit != 10 {
		t.Fatalf("AllowN on a fresh key: %+v", d)
	}
}
