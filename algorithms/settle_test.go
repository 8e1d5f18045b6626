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
		var d Decision
		d, state = l.AllowN(state, now, s.n) // a denial's state is the input's, maybe re-encoded
		if d.Allowed != s.allowed || d.RetryAfter != s.retry {
			t.Errorf("step %d (at %v, n=%d): allowed %v retry %v, want %v %v", i, s.at, s.n, d.Allowed, d.RetryAfter, s.allowed, s.retry)
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
		// Used 32 of 8: 34 counted, 24 beyond the limit, repaid by the next windows.
		{at: 2 * time.Second, settle: true, n: 24, reservedAt: 2 * time.Second, allowed: true},
		{at: 2 * time.Second, n: 1, retry: 28 * time.Second},
		{at: 30*time.Second - 1, n: 1, retry: 1}, // 14 left
		{at: 30 * time.Second, n: 6, allowed: true},
		{at: 30 * time.Second, n: 1, retry: 10 * time.Second},
		// A refund of a reservation counted in an ended window comes off the debt carried
		// from there (4), and no further: the rest was counted against that window's admissions.
		{at: 31 * time.Second, settle: true, n: -4, reservedAt: 2 * time.Second, allowed: true},
		{at: 31 * time.Second, n: 4, allowed: true},
		{at: 31 * time.Second, settle: true, n: -2, reservedAt: 2 * time.Second},
		{at: 31 * time.Second, n: 1, retry: 9 * time.Second},
		// 3 times the limit in one window: denied for the next two.
		{at: 40 * time.Second, n: 10, allowed: true},
		{at: 40 * time.Second, settle: true, n: 20, reservedAt: 40 * time.Second, allowed: true},
		{at: 50 * time.Second, n: 1, retry: 20 * time.Second},
		{at: 70*time.Second - 1, n: 1, retry: 1},
		{at: 70 * time.Second, n: 10, allowed: true},
		// Nothing counted: a refund has nothing to come off.
		{at: 100 * time.Second, settle: true, n: -5, reservedAt: 95 * time.Second},
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
		// Nothing counted any more: a refund has nothing to come off.
		{at: 40 * time.Second, settle: true, n: -1, reservedAt: 10 * time.Second},
		// 3 times the limit in one window: cur carries 20 into the next window, 10 of which
		// go on into the one after; from 80s only prev (10) weighs, less and less.
		{at: 50 * time.Second, n: 10, allowed: true},
		{at: 50 * time.Second, settle: true, n: 20, reservedAt: 50 * time.Second, allowed: true},
		{at: 60 * time.Second, n: 1, retry: 21 * time.Second},
		// Refunds of ended windows' reservations come off the carried debt: 15, then 2 left.
		{at: 60 * time.Second, settle: true, n: -5, reservedAt: 50 * time.Second, allowed: true},
		{at: 60 * time.Second, n: 1, retry: 16 * time.Second}, // at 76s: 10*0.4 + 5 + 1 <= 10
		{at: 70 * time.Second, settle: true, n: -3, reservedAt: 50 * time.Second, allowed: true},
		{at: 70 * time.Second, n: 1, retry: 3 * time.Second}, // 10*0.7 + 2 + 1 <= 10
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

// charged is what a key of limiter l has been charged, read from its state at now: capacity
// minus its balance, which is negative below empty, for a bucket; the count of now's window
// (the sliding counter's cur), its debt included, for a window.
func charged(t *testing.T, l Limiter, state []byte, now int64) int64 {
	t.Helper()
	switch l := l.(type) {
	case *TokenBucket:
		tokens, last, ok := l.decode(state, hdrSize)
		if !ok {
			return 0
		}
		return (l.capU - tokens + max(last-now, 0)*l.lg) / l.wg
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
		off, _ := l.locate(state)
		_, count, _ := l.load(state, off, now)
		return count
	case *SlidingWindowCounter:
		off, _ := l.locate(state)
		ws, prev, cur, _, ok := l.decode(state, off)
		_, _, _, cur, _ = l.roll(ws, prev, cur, 0, ok, now)
		return cur
	}
	t.Fatalf("no reading for %T", l)
	return 0
}

// TestSettleLongRunExact admits random reservations, settles them in random order with random
// usages (up to 4 times the windows' limit), or charges on_missing for the streams that end
// without usage: what the key has been charged is then exactly the usage reported plus the
// on_missing charges, below empty and beyond the limit included. The buckets stay at one
// instant (no refill). The windows move on by 1 to 3 windows now and then, while their count
// covers what those windows repay and the open reservations' refunds: each passed window has
// then repaid exactly its limit, and the refunds of the reservations counted before come off
// the debt carried past it.
func TestSettleLongRunExact(t *testing.T) {
	configs := []Config{
		{Algorithm: AlgTokenBucket, Limit: 1000, Window: time.Minute, Burst: 5000},
		{Algorithm: AlgLeakyBucket, Limit: 1000, Window: time.Minute, Burst: 5000},
		{Algorithm: AlgGCRA, Limit: 1000, Window: time.Minute, Burst: 5000},
		{Algorithm: AlgFixedWindow, Limit: 1000, Window: time.Hour},
		{Algorithm: AlgSlidingWindow, Limit: 1000, Window: time.Hour},
	}
	for _, c := range configs {
		t.Run(c.Algorithm, func(t *testing.T) {
			l := mustNew(t, c)
			const maxUsage = 4000
			window := c.Algorithm == AlgFixedWindow || c.Algorithm == AlgSlidingWindow
			var totalPassed int64
			for seed := range uint64(50) {
				r := rand.New(rand.NewPCG(seed, 7))
				var state []byte
				type reservation struct{ n, at int64 }
				var open []reservation
				var want, repaid, passed, openUnits int64
				now := t0 + int64(54*time.Minute) // in the windows, where prev weighs a tenth
				for range 300 {
					if k := 1 + r.Int64N(3); window && r.IntN(6) == 0 && charged(t, l, state, now) >= k*c.Limit+openUnits {
						now += k * int64(c.Window)
						passed += k
						repaid += k * c.Limit
						continue
					}
					if len(open) == 0 || r.IntN(2) == 0 {
						reserve := 1 + r.Int64N(200)
						if d, out := l.AllowN(state, now, reserve); d.Allowed {
							state = out
							open = append(open, reservation{reserve, now})
							openUnits += reserve
						}
						continue
					}
					i := r.IntN(len(open))
					rs := open[i]
					open = append(open[:i], open[i+1:]...)
					openUnits -= rs.n
					var usage int64
					switch r.IntN(4) {
					case 0: // no usage: on_missing "reserve" or "max"
						usage = rs.n
						if r.IntN(2) == 0 {
							usage = maxUsage
						}
					default:
						usage = r.Int64N(maxUsage + 1)
					}
					want += usage
					if out, ok := Settle(l, state, now, rs.at, usage-rs.n); ok {
						state = out
					}
				}
				want += openUnits
				if got := charged(t, l, state, now) + repaid; got != want {
					t.Fatalf("seed %d: charged %d (%d windows passed), want %d", seed, got, passed, want)
				}
				totalPassed += passed
			}
			if window && totalPassed < 250 {
				t.Errorf("only %d windows passed", totalPassed)
			}
		})
	}
}

// TestSettleDebtCeiling: a window key's debt is forgiven beyond what about 52 days of windows
// repay (at least two windows' worth), and beyond the 32-bit count.
func TestSettleDebtCeiling(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want int64 // the count a large debt leaves
	}{
		{Config{Algorithm: AlgFixedWindow, Limit: 5, Window: 31 * 24 * time.Hour}, 10},
		{Config{Algorithm: AlgSlidingWindow, Limit: 5, Window: 31 * 24 * time.Hour}, 10},
		{Config{Algorithm: AlgFixedWindow, Limit: 7, Window: 24 * time.Hour}, 7 * 52},
		{Config{Algorithm: AlgSlidingWindow, Limit: 1_000_000_000, Window: time.Hour}, 1<<32 - 1},
	} {
		l, w := mustNew(t, tc.c), int64(tc.c.Window)
		start := t0 - t0%w
		state, _ := Settle(l, nil, start, start, 1<<40)
		if got := charged(t, l, state, start); got != tc.want {
			t.Errorf("%+v: a debt of 2^40 left %d, want %d", tc.c, got, tc.want)
		}
		// The debt is repaid, the limit per window.
		n := min(tc.want/tc.c.Limit, 4)
		if d, _ := l.AllowN(state, start+n*w-1, 1); d.Allowed {
			t.Errorf("%+v: admitted before the debt was repaid", tc.c)
		}
	}
}

// TestSettleDebtConverted: a window key in debt, read under a changed configuration, converts
// without grant: nothing is left while the old configuration still carries the debt, and the
// whole new limit once it is repaid.
func TestSettleDebtConverted(t *testing.T) {
	for _, alg := range []string{AlgFixedWindow, AlgSlidingWindow} {
		w := int64(10 * time.Second)
		state, _ := Settle(mustNew(t, Config{Algorithm: alg, Limit: 10, Window: dur(w)}), nil, t0, t0, 30)
		cur := mustNew(t, Config{Algorithm: alg, Limit: 20, Window: dur(w)})
		for _, at := range []int64{t0, t0 + w, t0 + 2*w} {
			if d, _ := cur.AllowN(state, at, 1); d.Allowed || cur.Idle(state, at) {
				t.Errorf("%s at +%v: a key in debt converted with allowance left (%+v)", alg, dur(at-t0), d)
			}
		}
		at := t0 + 3*w
		if alg == AlgSlidingWindow {
			at += w // prev weighs the last window of the debt
		}
		if !cur.Idle(state, at) {
			t.Errorf("%s: the repaid key is not idle", alg)
		}
		if d, _ := cur.AllowN(state, at, 20); !d.Allowed {
			t.Errorf("%s: the repaid key was not converted to a fresh one (%+v)", alg, d)
		}
	}
}
