package algorithms

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// usageStep is one call of a settlement step table, at t0+at: an admission of n units
// (settle false), checked for its decision and exact RetryAfter, or a settlement of delta
// units for a reservation admitted at t0+reservedAt (settle true), checked for whether it
// wrote a state.
type usageStep struct {
	at         time.Duration
	settle     bool
	n          int64 // units asked for, or the delta settled
	reservedAt time.Duration
	allowed    bool // the admission's decision, or whether the settlement wrote
	retry      time.Duration
}

func runUsageSteps(t *testing.T, l Limiter, steps []usageStep) {
	t.Helper()
	var state []byte
	for i, s := range steps {
		now := t0 + int64(s.at)
		if s.settle {
			out, ok := Settle(l, state, now, t0+int64(s.reservedAt), s.n)
			if ok != s.allowed {
				t.Errorf("step %d (at %v, settle %d): wrote %v, want %v", i, s.at, s.n, ok, s.allowed)
			}
			if ok {
				state = out
			}
			continue
		}
		d, out := l.AllowN(state, now, s.n)
		if d.Allowed != s.allowed || d.RetryAfter != s.retry {
			t.Errorf("step %d (at %v, n=%d): allowed %v retry %v, want %v %v", i, s.at, s.n, d.Allowed, d.RetryAfter, s.allowed, s.retry)
		}
		if d.Allowed {
			state = out
		}
	}
}

// bucketUsageSteps are the same decisions for the token bucket, the leaky bucket meter and
// GCRA at 10 per 10s (one unit a second), capacity 10: a reservation of 5, a refund of 3, a
// debt of 4 that puts the key 4 units below empty, repaid at the rate.
var bucketUsageSteps = []usageStep{
	{at: 0, n: 5, allowed: true},
	{at: 0, settle: true, n: -3, allowed: true}, // used 2 of 5
	{at: 0, n: 8, allowed: true},                // 10 - 2
	{at: 0, settle: true, n: 4, allowed: true},  // used 12 of 8: 4 below empty
	{at: 0, n: 1, retry: 5 * time.Second},
	{at: 5*time.Second - 1, n: 1, retry: 1},
	{at: 5 * time.Second, n: 1, allowed: true},
	// A refund that reaches into a debt: 3 below empty at 10s, then 8 come back, 5 are left.
	{at: 10 * time.Second, n: 5, allowed: true},
	{at: 10 * time.Second, settle: true, n: 3, allowed: true},
	{at: 10 * time.Second, settle: true, n: -8, allowed: true},
	{at: 10 * time.Second, n: 5, allowed: true},
	{at: 10 * time.Second, n: 1, retry: time.Second},
	// A refund on a full key gives nothing beyond the capacity.
	{at: 100 * time.Second, settle: true, n: -5},
	{at: 100 * time.Second, n: 10, allowed: true},
	{at: 100 * time.Second, n: 1, retry: time.Second},
}

func TestSettleStepsBuckets(t *testing.T) {
	for _, alg := range []string{AlgTokenBucket, AlgLeakyBucket, AlgGCRA} {
		t.Run(alg, func(t *testing.T) {
			runUsageSteps(t, mustNew(t, Config{Algorithm: alg, Limit: 10, Window: 10 * time.Second}), bucketUsageSteps)
		})
	}
}

func TestSettleStepsFixedWindow(t *testing.T) {
	runUsageSteps(t, mustNew(t, Config{Algorithm: AlgFixedWindow, Limit: 10, Window: 10 * time.Second}), []usageStep{
		{at: time.Second, n: 5, allowed: true},
		{at: 2 * time.Second, settle: true, n: -3, reservedAt: time.Second, allowed: true},
		{at: 2 * time.Second, n: 8, allowed: true},
		{at: 2 * time.Second, settle: true, n: 4, reservedAt: 2 * time.Second, allowed: true}, // the window is full
		{at: 2 * time.Second, n: 1, retry: 8 * time.Second},
		{at: 10 * time.Second, n: 10, allowed: true}, // the next window forgets the debt
		// A refund of a reservation counted in an ended window is dropped.
		{at: 21 * time.Second, settle: true, n: -5, reservedAt: 19 * time.Second},
		{at: 29 * time.Second, n: 5, allowed: true},
		{at: 29 * time.Second, settle: true, n: -5, reservedAt: 29 * time.Second, allowed: true},
		{at: 29 * time.Second, n: 10, allowed: true},
	})
}

func TestSettleStepsSlidingWindowCounter(t *testing.T) {
	runUsageSteps(t, mustNew(t, Config{Algorithm: AlgSlidingWindow, Limit: 10, Window: 10 * time.Second}), []usageStep{
		{at: 0, n: 5, allowed: true},
		{at: 0, settle: true, n: 3, allowed: true}, // used 8
		{at: 0, n: 3, retry: 11250 * ms},           // 8 of cur weigh less than 7 at 11.25s
		// In the next window the reservation is prev's: its refund comes off prev.
		{at: 10 * time.Second, settle: true, n: -8, reservedAt: 0, allowed: true},
		{at: 10 * time.Second, n: 10, allowed: true},
		{at: 10 * time.Second, n: 1, retry: 11 * time.Second},
		// A refund of a reservation older than prev is dropped.
		{at: 40 * time.Second, settle: true, n: -1, reservedAt: 10 * time.Second},
	})
}

func TestSettleFreshAndForeignStates(t *testing.T) {
	tb := mustNew(t, Config{Algorithm: AlgTokenBucket, Limit: 10, Window: 10 * time.Second})
	if _, ok := Settle(tb, nil, t0, t0, -3); ok {
		t.Error("a refund on a fresh key wrote a state")
	}
	if _, ok := Settle(tb, nil, t0, t0, 0); ok {
		t.Error("a zero delta wrote a state")
	}
	state, ok := Settle(tb, nil, t0, t0, 12)
	if !ok {
		t.Fatal("a debt on a fresh key wrote nothing")
	}
	if d, _ := tb.AllowN(state, t0+2*int64(time.Second)-1, 1); d.Allowed {
		t.Error("a key 2 below empty admitted a unit before 3s")
	}
	other := mustNew(t, Config{Algorithm: AlgTokenBucket, Limit: 20, Window: 10 * time.Second})
	if _, ok := Settle(other, state, t0, t0, -3); ok {
		t.Error("a state recorded under other parameters was settled")
	}
	for _, c := range []Config{
		{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 10, Window: time.Second},
		{Algorithm: AlgLeakyBucket, Limit: 10, Window: time.Second, MaxDelay: time.Second},
		{Algorithm: AlgAdaptive, Limit: 10, Window: time.Second, MinLimit: 1, MaxLimit: 10, ErrorThreshold: 0.1},
	} {
		if _, ok := Settle(mustNew(t, c), nil, t0, t0, 5); ok {
			t.Errorf("%s %s: settled", c.Algorithm, c.Variant)
		}
		if err := CheckUsage(c, 100); err == nil {
			t.Errorf("%s %s: CheckUsage accepted it", c.Algorithm, c.Variant)
		}
	}
}

func TestCheckUsage(t *testing.T) {
	for _, tc := range []struct {
		c     Config
		max   int64
		field string
	}{
		{Config{Algorithm: AlgTokenBucket, Limit: 100000, Window: time.Minute}, 100000, ""},
		{Config{Algorithm: AlgGCRA, Limit: 1000, Window: time.Hour}, 1_000_000_000, "max"},
		{Config{Algorithm: AlgTokenBucket, Limit: 1_000_000_000, Window: time.Millisecond}, 10, "limit"},
		{Config{Algorithm: AlgFixedWindow, Limit: 10, Window: time.Second}, 0, "max"},
		{Config{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 10, Window: time.Second}, 10, "variant"},
	} {
		err := CheckUsage(tc.c, tc.max)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v max %d: %v", tc.c, tc.max, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
			t.Errorf("%+v max %d: got %v, want an error on %s", tc.c, tc.max, err, tc.field)
		}
	}
}

// charged is what a key of limiter l has consumed at now, read from its state: capacity minus
// its balance, which is negative below empty.
func charged(t *testing.T, l Limiter, state []byte, now int64) int64 {
	t.Helper()
	switch l := l.(type) {
	case *TokenBucket:
		tokens, last, ok := l.b.decode(state, hdrSize)
		if !ok {
			return 0
		}
		return (l.b.capU - tokens + max(last-now, 0)*l.b.lg) / l.b.wg
	case *LeakyBucket:
		level, last, ok := l.b.decode(state, hdrSize)
		if !ok {
			return 0
		}
		return (level + max(last-now, 0)*l.b.lg) / l.b.wg
	case *GCRA:
		tat, ok := l.decode(state, hdrSize)
		if !ok {
			return 0
		}
		return max(tat-now, 0) / l.t
	case *FixedWindow:
		_, count := l.load(state, hdrSize, now)
		return count
	case *SlidingWindowCounter:
		_, _, cur, _ := l.decode(state, l.cc.limit())
		return cur
	}
	t.Fatalf("no reading for %T", l)
	return 0
}

// TestSettleLongRunExact admits random reservations, settles them in random order with random
// usages, or charges on_missing for the streams that end without usage, all at one instant
// (no refill, one window): what the key has consumed is then exactly the usage reported plus
// the on_missing charges, below empty included.
func TestSettleLongRunExact(t *testing.T) {
	configs := []Config{
		{Algorithm: AlgTokenBucket, Limit: 1000, Window: time.Minute, Burst: 5000},
		{Algorithm: AlgLeakyBucket, Limit: 1000, Window: time.Minute, Burst: 5000},
		{Algorithm: AlgGCRA, Limit: 1000, Window: time.Minute, Burst: 5000},
		// The windows forget a debt beyond the limit: a limit the usages cannot reach.
		{Algorithm: AlgFixedWindow, Limit: 1_000_000, Window: time.Hour},
		{Algorithm: AlgSlidingWindow, Limit: 1_000_000, Window: time.Hour},
	}
	for _, c := range configs {
		t.Run(c.Algorithm, func(t *testing.T) {
			l := mustNew(t, c)
			const maxUsage = 400
			for seed := range uint64(50) {
				r := rand.New(rand.NewPCG(seed, 7))
				var state []byte
				var open []int64
				var want int64
				now := t0 + int64(time.Second)
				for range 200 {
					if len(open) == 0 || r.IntN(2) == 0 {
						reserve := 1 + r.Int64N(200)
						if d, out := l.AllowN(state, now, reserve); d.Allowed {
							state = out
							open = append(open, reserve)
						}
						continue
					}
					i := r.IntN(len(open))
					reserve := open[i]
					open = append(open[:i], open[i+1:]...)
					var usage int64
					switch r.IntN(4) {
					case 0: // no usage: on_missing "reserve" or "max"
						usage = reserve
						if r.IntN(2) == 0 {
							usage = maxUsage
						}
					default:
						usage = r.Int64N(maxUsage + 1)
					}
					want += usage
					if out, ok := Settle(l, state, now, now, usage-reserve); ok {
						state = out
					}
				}
				for _, reserve := range open {
					want += reserve
				}
				if got := charged(t, l, state, now); got != want {
					t.Fatalf("seed %d: charged %d, want %d", seed, got, want)
				}
			}
		})
	}
}
