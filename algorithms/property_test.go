package algorithms

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// allConfigs covers every algorithm and layout with small limits, so that random sequences hit
// every branch (bursts, refills, window rolls, denials) often.
func allConfigs() []Config {
	return []Config{
		{Algorithm: AlgTokenBucket, Limit: 10, Window: time.Second, Burst: 5},
		{Algorithm: AlgTokenBucket, Limit: 3, Window: time.Second},
		{Algorithm: AlgTokenBucket, Limit: 7, Window: 1300 * ms, Burst: 3},
		{Algorithm: AlgLeakyBucket, Limit: 10, Window: time.Second, Burst: 5},
		{Algorithm: AlgLeakyBucket, Limit: 7, Window: 1300 * ms},
		{Algorithm: AlgLeakyBucket, Limit: 10, Window: time.Second, Burst: 5, MaxDelay: 300 * ms},
		{Algorithm: AlgLeakyBucket, Limit: 3, Window: time.Second, MaxDelay: 10 * time.Second},
		{Algorithm: AlgLeakyBucket, Limit: 7, Window: 1300 * ms, Burst: 4, MaxDelay: 555 * ms},
		{Algorithm: AlgSlidingWindow, Limit: 10, Window: time.Second},
		{Algorithm: AlgSlidingWindow, Limit: 7, Window: 1300 * ms},
		{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 10, Window: time.Second},
		{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 5, Window: 5 * time.Second}, // 8-byte deltas
		{Algorithm: AlgFixedWindow, Limit: 10, Window: time.Second},
		{Algorithm: AlgFixedWindow, Limit: 7, Window: 1300 * ms},
		{Algorithm: AlgGCRA, Limit: 10, Window: time.Second, Burst: 5},
		{Algorithm: AlgGCRA, Limit: 3, Window: time.Second},
		{Algorithm: AlgGCRA, Limit: 7, Window: 1300 * ms, Burst: 2},
		{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 2, Window: time.Second, ErrorThreshold: 0.1},
	}
}

func name(c Config) string {
	s := c.Algorithm
	if c.Variant != "" {
		s += "/" + c.Variant
	}
	if c.MaxDelay > 0 {
		s += "/shaper"
	}
	return fmt.Sprintf("%s/%d_per_%v_burst%d", s, c.Limit, c.Window, c.Burst)
}

// capacityOfLimiter is the largest n a fresh key admits at once.
func capacityOfLimiter(l Limiter) int64 {
	switch v := l.(type) {
	case *TokenBucket:
		return v.capacity
	case *LeakyBucket:
		return v.b.capacity
	case *GCRA:
		return v.burst
	case *FixedWindow:
		return v.limit
	case *SlidingWindowCounter:
		return v.cc.lim
	case *SlidingWindowLog:
		return v.limit
	case *Adaptive:
		return v.initial
	}
	panic(fmt.Sprintf("unknown limiter %T", l))
}

type call struct{ at, n int64 }

// randomCalls makes a sequence whose gaps are drawn relative to the window, so that every
// algorithm sees bursts (gap 0), sub-interval gaps, boundary-sized gaps and long idle periods.
// With skew > 0, some calls go back in time by up to skew.
func randomCalls(r *rand.Rand, c Config, count int, skew int64) []call {
	w := int64(c.Window)
	capacity := c.Capacity()
	now := t0 + r.Int64N(w)
	calls := make([]call, count)
	for i := range calls {
		switch r.IntN(6) {
		case 0, 1:
			// same instant
		case 2:
			now += r.Int64N(w/max(c.Limit, 1) + 1)
		case 3:
			now += r.Int64N(w / 4)
		case 4:
			now += w - 2 + r.Int64N(5) // around a window
		case 5:
			now += r.Int64N(3 * w)
		}
		at := now
		if skew > 0 && r.IntN(4) == 0 {
			at -= r.Int64N(skew)
		}
		n := int64(1)
		if r.IntN(3) == 0 {
			n = 1 + r.Int64N(capacity+1) // sometimes more than the capacity
		}
		calls[i] = call{at, n}
	}
	return calls
}

// admitted is an allowed call: its size and its instant on the timelines the limiters
// promise something about. real is the caller's now; maxAt is the running maximum over all
// calls (what limiters that record every call see); rec is the running maximum over admitted
// calls (what the log records); release is when the shaper releases it.
type admitted struct{ at, n, real, maxAt, rec, release int64 }

// TestProperties runs random sequences through every limiter and checks the decision
// invariants, the exactness of RetryAfter and ResetAfter, Idle, and the algorithm's promise
// over the admitted events.
func TestProperties(t *testing.T) {
	for ci, c := range allConfigs() {
		t.Run(name(c), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 42))
			l := mustNew(t, c)
			for seq := 0; seq < 40; seq++ {
				var skew int64
				if seq%2 == 1 {
					skew = int64(c.Window) / 2
				}
				calls := randomCalls(r, c, 200, skew)
				runProperties(t, l, c, calls)
			}
		})
	}
}

func runProperties(t *testing.T, l Limiter, c Config, calls []call) {
	t.Helper()
	capacity := capacityOfLimiter(l)
	state := make([]byte, 0, l.StateSize())
	var adm []admitted
	var maxAt, rec int64
	for i, cl := range calls {
		before := append([]byte(nil), state...)
		if cl.n >= 1 && cl.n <= capacity {
			// Unsatisfiable calls return the state unchanged, so they record no instant.
			maxAt = max(maxAt, cl.at)
		}
		var d Decision
		d, state = l.AllowN(state, cl.at, cl.n)
		ctx := func() string { return fmt.Sprintf("call %d (at t0%+d, n=%d): %+v", i, cl.at-t0, cl.n, d) }
		if len(state) > l.StateSize() {
			t.Fatalf("%s: state of %d bytes > StateSize %d", ctx(), len(state), l.StateSize())
		}
		if d.Remaining < 0 || d.Remaining > capacity || d.ResetAfter < 0 || d.Delay < 0 || d.RetryAfter < 0 {
			t.Fatalf("%s: out of range", ctx())
		}
		if d.Allowed && d.RetryAfter != 0 {
			t.Fatalf("%s: allowed with a RetryAfter", ctx())
		}
		if _, shaper := l.(*LeakyBucket); (!shaper || c.MaxDelay == 0) && d.Delay != 0 {
			t.Fatalf("%s: Delay from a non-shaper", ctx())
		}
		if c.MaxDelay > 0 && d.Delay > c.MaxDelay {
			t.Fatalf("%s: Delay above MaxDelay", ctx())
		}
		satisfiable := cl.n >= 1 && cl.n <= capacity
		if a, ok := l.(*Adaptive); ok {
			limit, _, _, _, ok := a.decode(before)
			if !ok {
				limit = a.initial
			}
			satisfiable = cl.n >= 1 && cl.n <= limit
		}
		if d.Unsatisfiable() != !satisfiable {
			t.Fatalf("%s: unsatisfiable=%v, want %v", ctx(), d.Unsatisfiable(), !satisfiable)
		}
		if !d.Allowed && !bytes.Equal(semantic(l, before, cl.at), semantic(l, state, cl.at)) {
			t.Fatalf("%s: a denial changed the state", ctx())
		}
		if !d.Allowed && satisfiable {
			// RetryAfter is exact: allowed then, denied one nanosecond earlier.
			if d2, _ := l.AllowN(append([]byte(nil), before...), cl.at+int64(d.RetryAfter), cl.n); !d2.Allowed {
				t.Fatalf("%s: still denied after RetryAfter: %+v", ctx(), d2)
			}
			if d3, _ := l.AllowN(append([]byte(nil), before...), cl.at+int64(d.RetryAfter)-1, cl.n); d3.Allowed {
				t.Fatalf("%s: already allowed 1ns before RetryAfter: %+v", ctx(), d3)
			}
		}
		// ResetAfter is exact: full allowance then, not 1ns earlier.
		full := func(at int64) bool {
			d, _ := l.AllowN(append([]byte(nil), state...), at, capacity)
			return d.Allowed
		}
		if !full(cl.at + int64(d.ResetAfter)) {
			t.Fatalf("%s: no full allowance after ResetAfter", ctx())
		}
		if d.ResetAfter > 0 && full(cl.at+int64(d.ResetAfter)-1) && cl.at >= maxAt {
			t.Fatalf("%s: full allowance 1ns before ResetAfter", ctx())
		}
		if d.Allowed {
			rec = max(rec, cl.at)
			adm = append(adm, admitted{n: cl.n, real: cl.at, maxAt: maxAt, rec: rec, release: cl.at + int64(d.Delay)})
		}
		// Idle state behaves like a fresh key.
		if cl.at >= maxAt && l.Idle(state, cl.at) {
			da, _ := l.AllowN(append([]byte(nil), state...), cl.at, capacity)
			db, _ := l.AllowN(nil, cl.at, capacity)
			if da != db {
				t.Fatalf("%s: idle state decides %+v, fresh key %+v", ctx(), da, db)
			}
		}
	}
	checkPromise(t, l, c, adm)
}

// semantic returns what a state means at now: the decisions it gives for every satisfiable n.
// Two states are equivalent for a denial check when these agree.
func semantic(l Limiter, state []byte, now int64) []byte {
	var out []byte
	for n := int64(1); n <= capacityOfLimiter(l); n++ {
		d, _ := l.AllowN(append([]byte(nil), state...), now, n)
		out = fmt.Appendf(out, "%v|", d)
	}
	return out
}

// checkPromise checks what each algorithm guarantees over the admitted events, each on the
// timeline it records: the running maximum of all calls for the buckets and windows, of the
// admitted calls for the log, the callers' own clocks for GCRA (its TAT inequality holds for
// any order of calls), and the release times for the shaper.
func checkPromise(t *testing.T, l Limiter, c Config, adm []admitted) {
	t.Helper()
	for i := range adm {
		switch l.(type) {
		case *GCRA:
			adm[i].at = adm[i].real
		case *SlidingWindowLog:
			adm[i].at = adm[i].rec
		default:
			adm[i].at = adm[i].maxAt
		}
	}
	w, lim := int64(c.Window), c.Limit
	capacity := c.Capacity()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("promise broken: "+format, args...)
	}
	switch v := l.(type) {
	case *TokenBucket, *LeakyBucket:
		if c.MaxDelay > 0 {
			// Released stream: between releases i and j, the events of i+1..j took at least
			// their share of the leak rate (ceil rounding of releases costs at most 1ns).
			for i := range adm {
				var sum int64
				for j := i + 1; j < len(adm); j++ {
					sum += adm[j].n
					if sum*w > (adm[j].release-adm[i].release+1)*lim {
						fail("%d events released in %v", sum, time.Duration(adm[j].release-adm[i].release))
					}
				}
			}
			return
		}
		// In any [ti, tj], at most capacity + rate×(tj−ti).
		for i := range adm {
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].n
				if sum*w > capacity*w+lim*(adm[j].at-adm[i].at) {
					fail("%d events in %v", sum, time.Duration(adm[j].at-adm[i].at))
				}
			}
		}
	case *GCRA:
		// sum(n)×T <= tau + tj − ti for any i <= j in call order, even when tj < ti.
		for i := range adm {
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].n
				if sum*v.t > v.burst*v.t+(adm[j].at-adm[i].at) {
					fail("%d events in %v", sum, time.Duration(adm[j].at-adm[i].at))
				}
			}
		}
	case *FixedWindow, *SlidingWindowCounter, *Adaptive:
		// At most Limit per aligned window (the fixed window's promise, and also the
		// counter's), and for the counter fewer than 2×Limit in any sliding window.
		perWindow := map[int64]int64{}
		for _, a := range adm {
			perWindow[a.at-a.at%w] += a.n
			if perWindow[a.at-a.at%w] > lim {
				fail("%d events in the window at %d", perWindow[a.at-a.at%w], a.at-a.at%w)
			}
		}
		if _, fixed := v.(*FixedWindow); !fixed {
			slidingMax(t, adm, w, 2*lim-1)
		}
	case *SlidingWindowLog:
		slidingMax(t, adm, w, lim)
	}
}

// slidingMax checks that no window (t−w, t] holds more than bound admitted events.
func slidingMax(t *testing.T, adm []admitted, w, bound int64) {
	t.Helper()
	lo := 0
	var sum int64
	for j := range adm {
		sum += adm[j].n
		for adm[lo].at <= adm[j].at-w {
			sum -= adm[lo].n
			lo++
		}
		if sum > bound {
			t.Fatalf("promise broken: %d events in (%d, %d], bound %d", sum, adm[j].at-w, adm[j].at, bound)
		}
	}
}

// TestMonotoneClamp checks that, for the limiters that record the last instant they saw on
// every call, a sequence with time going backwards decides exactly like the same sequence
// with each time replaced by the running maximum: a stale call never gets more.
func TestMonotoneClamp(t *testing.T) {
	for ci, c := range allConfigs() {
		switch c.Algorithm {
		case AlgTokenBucket, AlgFixedWindow:
		case AlgLeakyBucket:
			if c.MaxDelay > 0 {
				continue
			}
		default:
			continue
		}
		t.Run(name(c), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 7))
			l := mustNew(t, c)
			for seq := 0; seq < 30; seq++ {
				calls := randomCalls(r, c, 300, int64(c.Window))
				var s1, s2 []byte
				var maxAt int64
				for i, cl := range calls {
					at2 := max(maxAt, cl.at)
					if cl.n >= 1 && cl.n <= c.Capacity() {
						maxAt = at2 // unsatisfiable calls record nothing
					}
					var d1, d2 Decision
					d1, s1 = l.AllowN(s1, cl.at, cl.n)
					d2, s2 = l.AllowN(s2, at2, cl.n)
					skew := time.Duration(at2 - cl.at)
					if d1.Allowed != d2.Allowed || d1.Remaining != d2.Remaining ||
						(d1.RetryAfter != 0 && d1.RetryAfter != d2.RetryAfter+skew) ||
						(d1.ResetAfter != 0 && d1.ResetAfter != d2.ResetAfter+skew) || !bytes.Equal(s1, s2) {
						t.Fatalf("call %d: at t0%+d: %+v; at the running max (+%v): %+v", i, cl.at-t0, d1, skew, d2)
					}
				}
			}
		})
	}
}

// TestLeakyMeterIsTokenBucket checks the documented equivalence: the leaky-bucket meter and
// the token bucket make the same decisions.
func TestLeakyMeterIsTokenBucket(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, c := range []Config{
		{Limit: 10, Window: time.Second, Burst: 5},
		{Limit: 7, Window: 1300 * ms},
		{Limit: 1, Window: time.Minute, Burst: 3},
	} {
		tc, lc := c, c
		tc.Algorithm, lc.Algorithm = AlgTokenBucket, AlgLeakyBucket
		tl, ll := mustNew(t, tc), mustNew(t, lc)
		var ts, ls []byte
		for i, cl := range randomCalls(r, tc, 5000, int64(c.Window)) {
			var td, ld Decision
			td, ts = tl.AllowN(ts, cl.at, cl.n)
			ld, ls = ll.AllowN(ls, cl.at, cl.n)
			if td != ld {
				t.Fatalf("%+v call %d: token bucket %+v, leaky meter %+v", c, i, td, ld)
			}
		}
	}
}

// TestSlidingCounterApproximation checks the documented bound: the counter admits fewer than
// 2×Limit in a sliding window, the worst case reaches 2×Limit−1, and its quantised estimate
// never admits more than the exact formula previous×(1−elapsed/W)+current would.
func TestSlidingCounterApproximation(t *testing.T) {
	const lim = 100
	l := mustNew(t, Config{Algorithm: AlgSlidingWindow, Limit: lim, Window: time.Second})
	// Worst case: the whole previous window's allowance in its last nanosecond, then a
	// request every microsecond of the next window.
	var state []byte
	var adm []admitted
	at := t0 + int64(time.Second) - 1
	for i := 0; i < lim; i++ {
		var d Decision
		if d, state = l.AllowN(state, at, 1); d.Allowed {
			adm = append(adm, admitted{at: at, n: 1})
		}
	}
	for at = t0 + int64(time.Second); at < t0+int64(2*time.Second)-1; at += int64(time.Microsecond) {
		var d Decision
		if d, state = l.AllowN(state, at, 1); d.Allowed {
			adm = append(adm, admitted{at: at, n: 1})
		}
	}
	// All of them lie in (t0+1s−1−1s, t0+2s−1]... except none: count the window ending just
	// before the previous burst leaves it.
	var inWindow int64
	end := t0 + int64(2*time.Second) - 2
	for _, a := range adm {
		if a.at > end-int64(time.Second) && a.at <= end {
			inWindow++
		}
	}
	if inWindow != 2*lim-1 {
		t.Fatalf("worst case admitted %d in one sliding window, want 2×%d−1", inWindow, lim)
	}

	// Quantisation: against the exact rational estimate on random sequences.
	r := rand.New(rand.NewPCG(9, 9))
	c := Config{Algorithm: AlgSlidingWindow, Limit: 7, Window: 1300 * ms}
	sc := mustNew(t, c).(*SlidingWindowCounter)
	state = nil
	for i, cl := range randomCalls(r, c, 20000, 0) {
		off, _ := sc.locate(state)
		ws, prev, cur, _, ok := sc.decode(state, off)
		w, eff, prev, cur := sc.cc.roll(ws, prev, cur, ok, cl.at)
		var d Decision
		d, state = sc.AllowN(state, cl.at, cl.n)
		// exact: prev×(W−e)/W + cur + n <= L  <=>  prev×(W−e) + (cur+n)×W <= L×W
		W, e := int64(c.Window), eff-w
		exactAllowed := cl.n <= c.Limit && prev*(W-e)+(cur+cl.n)*W <= c.Limit*W
		if d.Allowed && !exactAllowed {
			t.Fatalf("call %d: quantised estimate admitted what the exact one denies", i)
		}
		// They differ only within previous/S events of the limit.
		if !d.Allowed && exactAllowed && prev*(W-e)+(cur+cl.n)*W+prev*sc.cc.slice < c.Limit*W {
			t.Fatalf("call %d: denied although the exact estimate is %d/S below the limit", i, prev)
		}
	}
}

// TestIdleAndFresh checks Idle on states that are obviously idle or busy.
func TestIdleAndFresh(t *testing.T) {
	for _, c := range allConfigs() {
		l := mustNew(t, c)
		if !l.Idle(nil, t0) || !l.Idle([]byte{0xee, 1, 2}, t0) {
			t.Errorf("%s: nil or garbage state is not idle", name(c))
		}
		_, s := l.AllowN(nil, t0, 1)
		if l.Idle(s, t0) {
			t.Errorf("%s: idle right after a request", name(c))
		}
		if !l.Idle(s, t0+int64(100*c.Window)) {
			t.Errorf("%s: not idle 100 windows later", name(c))
		}
	}
}

// TestNoCrossAlgorithmDecode feeds each limiter's state to every other limiter. A state in
// the v1 encodings (no parameters recorded) of another layout must be a fresh key there, as
// before (version bytes are distinct). A state in the current encoding is never misread as
// the reader's own: it is converted, so a busy key stays busy (see convert_test.go for the
// values).
func TestNoCrossAlgorithmDecode(t *testing.T) {
	cfgs := allConfigs()
	for i, ci := range cfgs {
		li := mustNew(t, ci)
		var s []byte
		for k := int64(0); k < ci.Capacity(); k++ {
			_, s = li.AllowN(s, t0, 1)
		}
		for j, cj := range cfgs {
			lj := mustNew(t, cj)
			if i == j {
				continue
			}
			if !sameLayout(ci, cj) && !lj.Idle(v1Of(s), t0) {
				t.Errorf("%s reads a v1 %s state as busy", name(cj), name(ci))
			}
			if lj.Idle(s, t0) {
				t.Errorf("%s reads an exhausted %s state as idle", name(cj), name(ci))
			}
		}
	}
}

// v1Of renders a current-encoding state in the v1 encoding of its layout (the parameter block
// removed), the layout that records no parameters and that the limiters still read.
func v1Of(s []byte) []byte {
	if len(s) < hdrSize {
		return s
	}
	ver := map[byte]byte{
		verTokenBucket2: verTokenBucket, verLeakyMeter2: verLeakyMeter, verLeakyShaper2: verLeakyShaper,
		verSlidingCount2: verSlidingCount, verSlidingLog32v2: verSlidingLog32, verSlidingLog64v2: verSlidingLog64,
		verFixedWindow2: verFixedWindow, verGCRA2: verGCRA, verAdaptiveAdmit2: verAdaptiveAdmit,
	}[s[0]]
	out := []byte{ver}
	if ver == verAdaptiveAdmit {
		out = append(out, s[1:5]...) // v1 adaptive kept the limit in force first
	}
	return append(out, s[hdrSize:]...)
}

// sameLayout reports whether two configurations share a state layout (same algorithm and
// variant), in which case states are meant to be read across them.
func sameLayout(a, b Config) bool {
	if a.Algorithm != b.Algorithm || a.Variant != b.Variant || (a.MaxDelay > 0) != (b.MaxDelay > 0) {
		return false
	}
	if a.Variant == VariantLog {
		return (a.Window < 1<<32) == (b.Window < 1<<32)
	}
	return true
}
