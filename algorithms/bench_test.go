package algorithms

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// benchConfigs are realistic rules: 100 events per second with a mix of allowed and denied
// calls when requests arrive every 5ms (twice the rate).
var benchConfigs = []struct {
	name string
	c    Config
}{
	{"token_bucket", Config{Algorithm: AlgTokenBucket, Limit: 100, Window: time.Second, Burst: 20}},
	{"leaky_bucket", Config{Algorithm: AlgLeakyBucket, Limit: 100, Window: time.Second, Burst: 20}},
	{"leaky_bucket_shaper", Config{Algorithm: AlgLeakyBucket, Limit: 100, Window: time.Second, Burst: 20, MaxDelay: 100 * ms}},
	{"sliding_window_counter", Config{Algorithm: AlgSlidingWindow, Limit: 100, Window: time.Second}},
	{"sliding_window_log", Config{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 100, Window: time.Second}},
	{"sliding_window_log_1024", Config{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 1024, Window: time.Second}},
	{"fixed_window", Config{Algorithm: AlgFixedWindow, Limit: 100, Window: time.Second}},
	{"gcra", Config{Algorithm: AlgGCRA, Limit: 100, Window: time.Second, Burst: 20}},
	{"adaptive", Config{Algorithm: AlgAdaptive, Limit: 100, MinLimit: 10, Window: time.Second, ErrorThreshold: 0.05}},
}

// BenchmarkAllowN measures the hot path: one reused state buffer, a request every 5ms for the
// 100-per-second rules (and every 0.5ms for the 1024-per-second log, to keep it full).
func BenchmarkAllowN(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			l := mustNew(b, bc.c)
			state := make([]byte, 0, l.StateSize())
			step := int64(5 * ms)
			if bc.c.Limit > 100 {
				step = int64(500 * time.Microsecond)
			}
			now := t0
			allowed := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var d Decision
				d, state = l.AllowN(state, now, 1)
				if d.Allowed {
					allowed++
				}
				now += step
			}
			b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
		})
	}
}

// BenchmarkTokenBucketVsXRate compares TokenBucket (including its state encode/decode) with
// golang.org/x/time/rate's in-memory limiter on the same call pattern.
func BenchmarkTokenBucketVsXRate(b *testing.B) {
	b.Run("algorithms.TokenBucket", func(b *testing.B) {
		l := mustNew(b, benchConfigs[0].c)
		state := make([]byte, 0, l.StateSize())
		now := t0
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_, state = l.AllowN(state, now, 1)
			now += int64(5 * ms)
		}
	})
	b.Run("x/time/rate", func(b *testing.B) {
		xl := rate.NewLimiter(100, 20)
		now := t0
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			xl.AllowN(time.Unix(0, now), 1)
			now += int64(5 * ms)
		}
	})
}

// BenchmarkAdaptiveUpdate measures one controller tick.
func BenchmarkAdaptiveUpdate(b *testing.B) {
	a := newTestAdaptive(b)
	ctrl := make([]byte, 0, ctrlSize)
	now := t0
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_, ctrl = a.Update(ctrl, good, now)
		now += int64(100 * ms)
	}
}

// TestZeroAllocs asserts the hot-path contract: with a buffer of StateSize bytes reused across
// calls, AllowN (and Idle, Update, AllowNLimit) never allocate.
func TestZeroAllocs(t *testing.T) {
	for _, bc := range benchConfigs {
		l := mustNew(t, bc.c)
		state := make([]byte, 0, l.StateSize())
		now := t0
		allocs := testing.AllocsPerRun(2000, func() {
			_, state = l.AllowN(state, now, 1+now%3)
			_ = l.Idle(state, now)
			now += int64(time.Millisecond)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocs per AllowN with a reused buffer", bc.name, allocs)
		}
	}
	a := newTestAdaptive(t)
	ctrl := make([]byte, 0, ctrlSize)
	st := make([]byte, 0, a.StateSize())
	now := t0
	if allocs := testing.AllocsPerRun(1000, func() {
		var limit int64
		limit, ctrl = a.Update(ctrl, good, now)
		_, st = a.AllowNLimit(st, now, 1, limit)
		now += int64(10 * ms)
	}); allocs != 0 {
		t.Errorf("adaptive Update+AllowNLimit: %v allocs", allocs)
	}
	// A fresh key allocates exactly once, with room for the largest state.
	l := mustNew(t, benchConfigs[4].c)
	_, s := l.AllowN(nil, t0, 1)
	if cap(s) != l.StateSize() {
		t.Errorf("fresh log state has cap %d, want StateSize %d", cap(s), l.StateSize())
	}
}

// TestAliasing checks the documented contract: the new state is written into the caller's
// buffer when it is large enough.
func TestAliasing(t *testing.T) {
	for _, c := range allConfigs() {
		l := mustNew(t, c)
		buf := make([]byte, 0, l.StateSize())
		_, s := l.AllowN(buf, t0, 1)
		if &s[:1][0] != &buf[:1][0] {
			t.Errorf("%s: state not written into the caller's buffer", name(c))
		}
		_, s2 := l.AllowN(s, t0+1, 1)
		if len(s2) > 0 && &s2[:1][0] != &buf[:1][0] {
			t.Errorf("%s: second state not written into the caller's buffer", name(c))
		}
	}
}

// BenchmarkConvert measures the slow path of a configuration change: a state written by the
// token bucket of benchConfigs read by each limiter of benchConfigs with other parameters
// (limit 50 instead of 100, or another algorithm), deciding a request that is denied (so
// the state stays in the old encoding and every iteration converts again), and Idle on it.
func BenchmarkConvert(b *testing.B) {
	old := mustNew(b, Config{Algorithm: AlgTokenBucket, Limit: 100, Window: time.Second, Burst: 20})
	var s []byte
	for i := 0; i < 20; i++ {
		_, s = old.AllowN(s, t0, 1)
	}
	for _, bc := range benchConfigs {
		c := bc.c
		c.Limit /= 2
		if c.Algorithm == AlgAdaptive {
			c.MinLimit = 5
		}
		l := mustNew(b, c)
		b.Run(bc.name+"/AllowN", func(b *testing.B) {
			buf := make([]byte, len(s), max(len(s), l.StateSize()))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				copy(buf, s)
				l.AllowN(buf[:len(s)], t0, 1)
			}
		})
		b.Run(bc.name+"/Idle", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				l.Idle(s, t0)
			}
		})
	}
}
