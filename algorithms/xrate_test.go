package algorithms

import (
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestTokenBucketMatchesXRate replays random sequences through TokenBucket and
// golang.org/x/time/rate and demands the same decision every time. The parameters are "nice"
// (Window/Limit a whole number of microseconds, calls on whole microseconds), where the two
// documented boundaries (sub-nanosecond shortfalls and float64 rounding) cannot be reached.
func TestTokenBucketMatchesXRate(t *testing.T) {
	type params struct {
		limit  int64
		window time.Duration
		burst  int64
	}
	var cases []params
	for _, w := range []time.Duration{100 * ms, time.Second, 2 * time.Second, time.Minute} {
		for _, l := range []int64{1, 2, 4, 5, 10, 20, 50, 100, 1000} {
			for _, b := range []int64{1, 3, 10} {
				cases = append(cases, params{l, w, b})
			}
		}
	}
	r := rand.New(rand.NewPCG(2024, 11))
	var allowed, denied int
	for _, p := range cases {
		tb := mustNew(t, Config{Algorithm: AlgTokenBucket, Limit: p.limit, Window: p.window, Burst: p.burst})
		for seq := 0; seq < 5; seq++ {
			xl := rate.NewLimiter(rate.Limit(float64(p.limit)/p.window.Seconds()), int(p.burst))
			state := make([]byte, 0, tb.StateSize())
			interval := int64(p.window) / p.limit
			now := t0
			for i := 0; i < 400; i++ {
				var gap int64
				switch r.IntN(4) {
				case 0:
				case 1:
					gap = r.Int64N(interval + 1)
				case 2:
					gap = r.Int64N(3 * interval)
				case 3:
					gap = r.Int64N(int64(p.window) * 2)
				}
				now += gap - gap%int64(time.Microsecond)
				n := 1 + r.Int64N(p.burst+1) // up to burst+1: both deny n > burst
				var d Decision
				d, state = tb.AllowN(state, now, n)
				want := xl.AllowN(time.Unix(0, now), int(n))
				if d.Allowed {
					allowed++
				} else {
					denied++
				}
				if d.Allowed != want {
					t.Fatalf("%+v seq %d call %d (t0%+d, n=%d): ours %v, x/time/rate %v (tokens %.12f)",
						p, seq, i, now-t0, n, d.Allowed, want, xl.TokensAt(time.Unix(0, now)))
				}
			}
		}
	}
	// The comparison means something only if both outcomes are common.
	if allowed < 10000 || denied < 10000 {
		t.Fatalf("unbalanced sequences: %d allowed, %d denied", allowed, denied)
	}
}

// TestTokenBucketXRateBoundary pins the documented difference: x/time/rate truncates a
// sub-nanosecond wait to zero and admits, this bucket computes exactly and denies for 1ns.
func TestTokenBucketXRateBoundary(t *testing.T) {
	tb := mustNew(t, Config{Algorithm: AlgTokenBucket, Limit: 3, Window: time.Second, Burst: 1})
	xl := rate.NewLimiter(3, 1)
	_, state := tb.AllowN(nil, t0, 1)
	if !xl.AllowN(time.Unix(0, t0), 1) {
		t.Fatal("x/time/rate denied a fresh key")
	}
	at := t0 + 333333333 // 0.999999999 tokens
	d, _ := tb.AllowN(state, at, 1)
	if d.Allowed || d.RetryAfter != 1 {
		t.Fatalf("exact bucket: %+v, want denied with RetryAfter 1ns", d)
	}
	if !xl.AllowN(time.Unix(0, at), 1) {
		t.Log("x/time/rate no longer admits the sub-nanosecond shortfall; update the TokenBucket doc")
	}
}
