package algorithms

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// fuzzLimiters is every configuration of allConfigs plus extremes of the validation bounds,
// so hostile states meet the largest accepted constants too.
func fuzzLimiters(t testing.TB) []Limiter {
	cfgs := append(allConfigs(),
		Config{Algorithm: AlgTokenBucket, Limit: 1, Window: MaxWindow},
		Config{Algorithm: AlgTokenBucket, Limit: LimitCeiling, Window: time.Second, Burst: LimitCeiling},
		Config{Algorithm: AlgLeakyBucket, Limit: LimitCeiling, Window: ms, MaxDelay: MaxWindow},
		Config{Algorithm: AlgLeakyBucket, Limit: 1, Window: MaxWindow, MaxDelay: ms},
		Config{Algorithm: AlgSlidingWindow, Limit: LimitCeiling, Window: MaxWindow},
		Config{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: LogLimitCeiling, Window: MaxWindow},
		Config{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 2, Window: ms},
		Config{Algorithm: AlgFixedWindow, Limit: LimitCeiling, Window: ms},
		Config{Algorithm: AlgGCRA, Limit: 1, Window: MaxWindow},
		Config{Algorithm: AlgGCRA, Limit: 1_000_000, Window: ms, Burst: LimitCeiling},
	)
	ls := make([]Limiter, len(cfgs))
	for i, c := range cfgs {
		ls[i] = mustNew(t, c)
	}
	return ls
}

// fuzzSeeds returns real states of every limiter (so the fuzzer starts from valid layouts it
// can mutate), plus truncations and garbage.
func fuzzSeeds(t testing.TB, ls []Limiter) [][]byte {
	var seeds [][]byte
	for _, l := range ls {
		var s []byte
		for i, at := range []int64{t0, t0, t0 + 1, t0 + int64(time.Second)} {
			_, s = l.AllowN(s, at, int64(i%2+1))
			seeds = append(seeds, append([]byte(nil), s...))
		}
		if len(s) > 0 {
			seeds = append(seeds, s[:len(s)-1], append(append([]byte(nil), s...), 0))
		}
	}
	return append(seeds, nil, []byte{}, []byte{0x41, 0xff, 0xff}, []byte{0x42, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
}

// FuzzAllowN feeds arbitrary state bytes, instants and sizes to every limiter: no panic, and
// the decision and the returned state stay within their contracts.
func FuzzAllowN(f *testing.F) {
	ls := fuzzLimiters(f)
	for i, s := range fuzzSeeds(f, ls) {
		f.Add(s, t0+int64(i)*int64(100*ms), int64(1+i%3), uint8(i))
	}
	f.Add([]byte(nil), int64(math.MinInt64), int64(math.MaxInt64), uint8(0))
	f.Add([]byte(nil), int64(math.MaxInt64), int64(math.MinInt64), uint8(1))
	f.Fuzz(func(t *testing.T, state []byte, now, n int64, which uint8) {
		l := ls[int(which)%len(ls)]
		in := append([]byte(nil), state...)
		d, out := l.AllowN(in, now, n)
		checkFuzzDecision(t, l, d, out, n)
		if _, adaptive := l.(*Adaptive); !adaptive && n >= 1 && n <= capacityOfLimiter(l) && !d.Allowed {
			// Even from a hostile state, a satisfiable denial has a RetryAfter that works
			// (when the retry instant is within the clamped time range). A state recorded
			// under other parameters is the documented exception: a denial does not store
			// its conversion, so the retry converts again, from the old configuration.
			if d.RetryAfter < 1 {
				t.Fatalf("satisfiable denial without RetryAfter: %+v", d)
			}
			if retry := now + int64(d.RetryAfter); !converts(l, state) && now >= 0 && now <= MaxTime/2 && retry <= MaxTime {
				if d2, _ := l.AllowN(append([]byte(nil), state...), retry, n); !d2.Allowed {
					t.Fatalf("denied again after RetryAfter: %+v then %+v", d, d2)
				}
			}
		}
		// The returned state must be usable again, and Idle must not panic on either.
		_ = l.Idle(state, now)
		_ = l.Idle(out, now)
		d2, out2 := l.AllowN(out, now, 1)
		checkFuzzDecision(t, l, d2, out2, 1)
		if a, ok := l.(*Adaptive); ok {
			d3, out3 := a.AllowNLimit(append([]byte(nil), state...), now, n, n)
			checkFuzzDecision(t, l, d3, out3, n)
		}
	})
}

func checkFuzzDecision(t *testing.T, l Limiter, d Decision, out []byte, n int64) {
	t.Helper()
	if d.Remaining < 0 || d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0 {
		t.Fatalf("negative field: %+v", d)
	}
	if d.Allowed && (d.RetryAfter != 0 || n < 1) {
		t.Fatalf("bad allow: %+v for n=%d", d, n)
	}
	if d.Allowed && len(out) > l.StateSize() {
		t.Fatalf("state of %d bytes > StateSize %d", len(out), l.StateSize())
	}
}

// converts reports whether l converts state (a current encoding recorded under other
// parameters or by another algorithm) before deciding.
func converts(l Limiter, state []byte) bool {
	var c bool
	switch v := l.(type) {
	case *TokenBucket:
		_, c = v.locate(state)
	case *LeakyBucket:
		_, c = v.locate(state)
	case *GCRA:
		_, c = v.locate(state)
	case *FixedWindow:
		_, c = v.locate(state)
	case *SlidingWindowCounter:
		_, c = v.locate(state)
	case *SlidingWindowLog:
		_, _, _, _, _, c = v.header(state)
	case *Adaptive:
		_, c = v.locate(state)
	default:
		panic(fmt.Sprintf("unknown limiter %T", l))
	}
	return c
}

// FuzzRecordedConfig checks that any bytes either yield no configuration or one that the
// parameter block can hold, without panicking, and that peekOld stays within its range.
func FuzzRecordedConfig(f *testing.F) {
	for _, s := range fuzzSeeds(f, fuzzLimiters(f)) {
		f.Add(s, t0)
	}
	f.Fuzz(func(t *testing.T, state []byte, now int64) {
		c, ok := RecordedConfig(state)
		if !ok {
			return
		}
		if c.Limit < 1 || c.Limit > 1<<32-1 || c.Burst < 0 || c.MaxDelay < 0 {
			t.Fatalf("recorded config out of range: %+v", c)
		}
		r, _, _, ok := peekOld(state, clampNow(now))
		if ok && (r < 0 || r > max(c.Limit, c.Burst)) {
			t.Fatalf("R_old %d out of range for %+v", r, c)
		}
	})
}

// FuzzAdaptiveUpdate feeds arbitrary controller states and signals to Update.
func FuzzAdaptiveUpdate(f *testing.F) {
	a := newTestAdaptive(f)
	_, s := a.Update(nil, good, t0)
	_, s2 := a.Update(append([]byte(nil), s...), errorful, t0+int64(time.Second))
	for _, seed := range [][]byte{nil, s, s2, s[:10]} {
		f.Add(seed, t0, int64(100), int64(5), int64(time.Second))
	}
	f.Add([]byte(nil), int64(-1), int64(math.MaxInt64), int64(math.MinInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, state []byte, now, req, errs, lat int64) {
		limit, out := a.Update(append([]byte(nil), state...), Signals{Requests: req, Errors: errs, LatencySum: time.Duration(lat)}, now)
		if limit < 10 || limit > 200 || len(out) != ctrlSize || a.CurrentLimit(out) != limit {
			t.Fatalf("Update: limit %d, state %x", limit, out)
		}
	})
}
