package algorithms

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// remainingAt is R_old: what l reports as Remaining for state at now, without changing it
// (an n = 0 request is unsatisfiable and stores nothing).
func remainingAt(l Limiter, state []byte, now int64) int64 {
	d, _ := l.AllowN(append([]byte(nil), state...), now, 0)
	return d.Remaining
}

// allowedNext sends requests of n events at now, one after the other with the returned
// state, until one is denied (at most limit+2 of them), and returns how many events were
// admitted and the last state.
func allowedNext(l Limiter, state []byte, now, n, limit int64) (int64, []byte) {
	state = append([]byte(nil), state...)
	var admitted int64
	for i := int64(0); i < limit+2; i++ {
		var d Decision
		d, state = l.AllowN(state, now, n)
		if !d.Allowed {
			break
		}
		admitted += n
	}
	return admitted, state
}

// exhaust admits `used` single events at at, or as many as the limiter takes when used < 0.
func exhaust(t *testing.T, l Limiter, used, at int64) []byte {
	t.Helper()
	var s []byte
	for i := int64(0); used < 0 || i < used; i++ {
		var d Decision
		d, s = l.AllowN(s, at, 1)
		if !d.Allowed {
			break // all of it, or as much as a shaper with a short MaxDelay takes
		}
	}
	return s
}

// TestConfigChangeKeepsTheOldAllowance is the configuration-change table: a key used under one
// configuration, then read under another a minute later, gets at most what the old
// configuration still allows.
func TestConfigChangeKeepsTheOldAllowance(t *testing.T) {
	h := time.Hour
	for _, row := range []struct {
		before, after Config
		used          int64 // -1: all of it
		want          int64
	}{
		{Config{Algorithm: AlgTokenBucket, Limit: 11, Window: h}, Config{Algorithm: AlgTokenBucket, Limit: 10, Window: h}, 10, 1},
		{Config{Algorithm: AlgTokenBucket, Limit: 10, Window: h}, Config{Algorithm: AlgTokenBucket, Limit: 10, Window: 30 * time.Minute}, 5, 5},
		{Config{Algorithm: AlgGCRA, Limit: 10, Window: h}, Config{Algorithm: AlgGCRA, Limit: 10, Window: 2 * h}, -1, 0},
		{Config{Algorithm: AlgLeakyBucket, Limit: 10, Window: h}, Config{Algorithm: AlgLeakyBucket, Limit: 10, Window: 2 * h}, -1, 0},
		{Config{Algorithm: AlgGCRA, Limit: 10, Window: h}, Config{Algorithm: AlgGCRA, Limit: 5, Window: 2 * h}, -1, 0},
	} {
		t.Run(name(row.before)+"->"+name(row.after), func(t *testing.T) {
			old, nw := mustNew(t, row.before), mustNew(t, row.after)
			s := exhaust(t, old, row.used, t0)
			at := t0 + int64(time.Minute)
			got, _ := allowedNext(nw, s, at, 1, 20)
			if got != row.want {
				t.Fatalf("allowed next: %d, want %d (R_old %d)", got, row.want, remainingAt(old, s, at))
			}
			// Without the change the old configuration would have allowed exactly this much
			// too (every row has R_old = want).
			if r := remainingAt(old, s, at); r != row.want {
				t.Fatalf("R_old %d, want %d", r, row.want)
			}
		})
	}
}

// changeBases are the configurations the matrix starts from: every algorithm and layout.
func changeBases() []Config {
	return []Config{
		{Algorithm: AlgTokenBucket, Limit: 6, Window: time.Second, Burst: 4},
		{Algorithm: AlgLeakyBucket, Limit: 6, Window: time.Second, Burst: 4},
		{Algorithm: AlgLeakyBucket, Limit: 6, Window: time.Second, Burst: 4, MaxDelay: 10 * time.Second},
		{Algorithm: AlgLeakyBucket, Limit: 6, Window: time.Second, Burst: 4, MaxDelay: 300 * ms},
		{Algorithm: AlgSlidingWindow, Limit: 6, Window: time.Second},
		{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 6, Window: time.Second},
		{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 6, Window: 6 * time.Second}, // 8-byte deltas
		{Algorithm: AlgFixedWindow, Limit: 6, Window: time.Second},
		{Algorithm: AlgGCRA, Limit: 6, Window: time.Second, Burst: 4},
		{Algorithm: AlgAdaptive, Limit: 6, MinLimit: 2, Window: time.Second, ErrorThreshold: 0.1},
	}
}

// changesOf returns every single-parameter change of c (limit up and down, window up and
// down, burst up and down, variant, shaping on and off, max_delay), and every other
// algorithm with the same limit and window.
func changesOf(c Config) []Config {
	var out []Config
	add := func(f func(*Config)) {
		n := c
		f(&n)
		out = append(out, n)
	}
	add(func(n *Config) { n.Limit *= 2 })
	add(func(n *Config) { n.Limit = max(1, n.Limit/2); n.MinLimit = min(n.MinLimit, n.Limit) })
	add(func(n *Config) { n.Limit++; n.Burst = 0 })
	add(func(n *Config) { n.Window *= 2 })
	add(func(n *Config) { n.Window /= 2 })
	add(func(n *Config) { n.Window += 300 * ms })
	switch c.Algorithm {
	case AlgTokenBucket, AlgLeakyBucket, AlgGCRA:
		add(func(n *Config) { n.Burst = c.Capacity() * 2 })
		add(func(n *Config) { n.Burst = max(1, c.Capacity()/2) })
		add(func(n *Config) { n.Burst = 1 })
	}
	switch {
	case c.Algorithm == AlgSlidingWindow && c.Variant == VariantLog:
		add(func(n *Config) { n.Variant = VariantCounter })
	case c.Algorithm == AlgSlidingWindow:
		add(func(n *Config) { n.Variant = VariantLog })
	case c.Algorithm == AlgLeakyBucket && c.MaxDelay == 0:
		add(func(n *Config) { n.MaxDelay = 400 * ms })
	case c.Algorithm == AlgLeakyBucket:
		add(func(n *Config) { n.MaxDelay = 0 })
		add(func(n *Config) { n.MaxDelay = c.MaxDelay / 2 })
		add(func(n *Config) { n.MaxDelay = c.MaxDelay * 3 })
	}
	for _, o := range changeBases() {
		if o.Algorithm == c.Algorithm && o.Variant == c.Variant && (o.MaxDelay > 0) == (c.MaxDelay > 0) {
			continue // the same algorithm: its changes are above
		}
		o.Limit, o.Window = c.Limit, c.Window
		if o.Burst != 0 {
			o.Burst = c.Capacity()
		}
		out = append(out, o)
	}
	return out
}

// shaperBinds reports whether l is a shaper whose MaxDelay is shorter than the time to drain a
// full queue: it then admits fewer than its capacity after a conversion.
func shaperBinds(l Limiter) bool {
	lb, ok := l.(*LeakyBucket)
	return ok && lb.shaper && lb.maxDelayEffective() < time.Duration(lb.capNs)
}

// checkChange reads state (written by old) with nw at now, sending requests of n events:
// never more than R_old is admitted, exactly min(R_old, capacity) rounded down to whole
// requests unless a shaper's MaxDelay binds, the admitted state records the new parameters,
// a denial returns the input unchanged, and Idle holds only at full allowance.
//
// A stale now (before the last instant of the history) only promises the first bound: the
// conversion then happens at the later instant the old state saw, which can only be
// stricter.
func checkChange(t *testing.T, old, nw Limiter, oldCfg, newCfg Config, state []byte, now, n int64, stale bool) {
	t.Helper()
	if newCfg == oldCfg || state == nil {
		return // no change, or no state to convert (every request of the history was refused)
	}
	rOld := remainingAt(old, state, now)
	capNew := capacityOfLimiter(nw)
	if old.Idle(state, now) {
		// A key the old configuration finds idle consumed nothing: it converts to a key with
		// the whole new capacity (see consumption).
		rOld = max(rOld, capNew)
	}
	got, out := allowedNext(nw, state, now, n, capNew)
	if got > rOld {
		t.Fatalf("admitted %d events, more than R_old = %d", got, rOld)
	}
	if !converts(nw, state) {
		// Adaptive to adaptive with the same window: the limit in force is the controller's
		// business (counts carry over, under the recorded limit clamped to the new bounds),
		// so only the bound above applies.
		if newCfg.Algorithm != AlgAdaptive {
			t.Fatalf("%s does not convert a state of other parameters", name(newCfg))
		}
		return
	}
	want := min(rOld, capNew) / n * n
	if n > capNew {
		want = 0
	}
	if got != want && !(shaperBinds(nw) && got < want) && !stale {
		t.Fatalf("admitted %d events, want %d (R_old %d, capacity %d)", got, want, rOld, capNew)
	}
	if got > 0 {
		rc, ok := RecordedConfig(out)
		if !ok || rc.Algorithm != newCfg.Algorithm || rc.Window != newCfg.Window ||
			(newCfg.Algorithm != AlgAdaptive && (rc.Limit != newCfg.Limit || rc.Capacity() != newCfg.Capacity() || rc.MaxDelay != newCfg.MaxDelay)) {
			t.Fatalf("admitted state records %+v, want %+v", rc, newCfg)
		}
	}
	in := append([]byte(nil), state...)
	if d, o := nw.AllowN(in, now, capNew+1); d.Allowed || !bytes.Equal(o, state) {
		t.Fatalf("an unsatisfiable request changed the state: %+v", d)
	}
	if rOld < capNew {
		in = append([]byte(nil), state...)
		if d, o := nw.AllowN(in, now, rOld+1); d.Allowed || !bytes.Equal(o, state) {
			t.Fatalf("a denial returned another state or was allowed: %+v", d)
		}
	}
	if nw.Idle(state, now) && rOld < capNew {
		t.Fatalf("idle with R_old %d below the capacity %d", rOld, capNew)
	}
	if !nw.Idle(state, now) && (rOld >= capNew || old.Idle(state, now)) && !stale {
		t.Fatalf("not idle although R_old %d >= capacity %d or old idle", rOld, capNew)
	}
}

// TestConfigChangeMatrix: every algorithm and layout x every parameter change (and every
// other algorithm, and a cost of 2), over fixed histories and instants.
func TestConfigChangeMatrix(t *testing.T) {
	for _, base := range changeBases() {
		old := mustNew(t, base)
		capOld := capacityOfLimiter(old)
		for _, nc := range changesOf(base) {
			nw := mustNew(t, nc)
			t.Run(name(base)+"->"+name(nc), func(t *testing.T) {
				w := int64(base.Window)
				for _, used := range []int64{1, capOld / 2, capOld - 1, -1} {
					// Used at once at t0, or spread over the window before t0+w.
					for _, spread := range []bool{false, true} {
						var s []byte
						if spread && used > 0 {
							for i := int64(0); i < used; i++ {
								_, s = old.AllowN(s, t0+i*w/2/(used+1), 1)
							}
						} else {
							s = exhaust(t, old, used, t0)
						}
						for _, dt := range []int64{w / 2, w - 1, w + w/3, 3 * w} {
							for _, n := range []int64{1, 2} {
								t.Run(fmt.Sprintf("used%d/spread%v/at+%v/n%d", used, spread, time.Duration(dt), n), func(t *testing.T) {
									checkChange(t, old, nw, base, nc, s, t0+dt, n, false)
								})
							}
						}
					}
				}
			})
		}
	}
}

// randomConfig draws a configuration of any algorithm with small parameters.
func randomConfig(r *rand.Rand) Config {
	c := Config{Limit: 1 + r.Int64N(12), Window: time.Duration(1+r.Int64N(3000)) * ms}
	burst := int64(0)
	if r.IntN(2) == 0 {
		burst = 1 + r.Int64N(15)
	}
	switch r.IntN(9) {
	case 0:
		c.Algorithm, c.Burst = AlgTokenBucket, burst
	case 1:
		c.Algorithm, c.Burst = AlgLeakyBucket, burst
	case 2:
		c.Algorithm, c.Burst = AlgLeakyBucket, burst
		c.MaxDelay = time.Duration(1+r.Int64N(int64(2*c.Window))) * time.Nanosecond
	case 3:
		c.Algorithm = AlgSlidingWindow
	case 4:
		c.Algorithm, c.Variant = AlgSlidingWindow, VariantLog
	case 5:
		c.Algorithm, c.Variant = AlgSlidingWindow, VariantLog
		c.Window += 5 * time.Second // 8-byte deltas
	case 6:
		c.Algorithm = AlgFixedWindow
	case 7:
		c.Algorithm, c.Burst = AlgGCRA, burst
	case 8:
		c.Algorithm, c.MinLimit, c.ErrorThreshold = AlgAdaptive, 1, 0.1
	}
	return c
}

// TestConfigChangeProperty: random configurations, random histories (with time going back
// now and then) and a random change at a random later instant (or, one time in five, an
// instant before the end of the history): the new configuration never admits more than
// R_old, admits exactly min(R_old, capacity) unless a shaper's MaxDelay
// binds, and afterwards keeps its own invariants (checked by runProperties on the calls that
// follow, from the converted state).
func TestConfigChangeProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 4))
	for i := 0; i < 3000; i++ {
		oc, nc := randomConfig(r), randomConfig(r)
		if r.IntN(4) == 0 {
			nc = oc
			nc.Limit = 1 + r.Int64N(12)
			if nc.Algorithm == AlgAdaptive {
				nc.MinLimit = 1
			}
		}
		old, nw := mustNew(t, oc), mustNew(t, nc)
		var s []byte
		var last int64
		for _, cl := range randomCalls(r, oc, 1+r.IntN(40), int64(oc.Window)/2) {
			_, s = old.AllowN(s, cl.at, cl.n)
			last = max(last, cl.at)
		}
		now := last + r.Int64N(2*int64(max(oc.Window, nc.Window)))
		stale := r.IntN(5) == 0
		if stale {
			now = last - r.Int64N(int64(oc.Window)/2+1)
		}
		n := int64(1)
		if r.IntN(3) == 0 {
			n = 1 + r.Int64N(3)
		}
		t.Run(fmt.Sprintf("%d:%s->%s", i, name(oc), name(nc)), func(t *testing.T) {
			checkChange(t, old, nw, oc, nc, s, now, n, stale)
			if i%10 == 0 && !stale {
				// Continue under the new configuration from the converted state.
				_, conv := allowedNext(nw, s, now, 1, 1)
				runPropertiesFrom(t, nw, nc, conv, randomCalls(r, nc, 100, 0), now)
			}
		})
	}
}

// runPropertiesFrom runs the property checks of runProperties on calls shifted to start after
// from, starting from state instead of a fresh key: the RetryAfter and ResetAfter exactness
// and the decision invariants hold for the new configuration once the converted state is
// stored.
func runPropertiesFrom(t *testing.T, l Limiter, c Config, state []byte, calls []call, from int64) {
	t.Helper()
	capacity := capacityOfLimiter(l)
	shift := from - calls[0].at + int64(c.Window)/3
	for i, cl := range calls {
		at := cl.at + shift
		before := append([]byte(nil), state...)
		var d Decision
		d, state = l.AllowN(state, at, cl.n)
		if d.Remaining < 0 || d.Remaining > capacity || d.RetryAfter < 0 || d.ResetAfter < 0 {
			t.Fatalf("call %d: out of range %+v", i, d)
		}
		if !d.Allowed && !d.Unsatisfiable() && !converts(l, before) {
			if d2, _ := l.AllowN(append([]byte(nil), before...), at+int64(d.RetryAfter), cl.n); !d2.Allowed {
				t.Fatalf("call %d: %+v, still denied after RetryAfter: %+v", i, d, d2)
			}
			if d3, _ := l.AllowN(append([]byte(nil), before...), at+int64(d.RetryAfter)-1, cl.n); d3.Allowed {
				t.Fatalf("call %d: allowed 1ns before RetryAfter", i)
			}
		}
	}
}

// TestV1StatesReadAsBefore checks the upgrade path: a state in the v1 encoding (no
// parameters) decides exactly as the same state in the current encoding under the same
// configuration, and is rewritten in the current encoding when a request is admitted.
func TestV1StatesReadAsBefore(t *testing.T) {
	for ci, c := range allConfigs() {
		t.Run(name(c), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 77))
			l := mustNew(t, c)
			var s []byte
			for i, cl := range randomCalls(r, c, 2000, int64(c.Window)/2) {
				v1 := v1Of(s)
				d1, o1 := l.AllowN(append([]byte(nil), s...), cl.at, cl.n)
				d2, o2 := l.AllowN(v1, cl.at, cl.n)
				if d1 != d2 {
					t.Fatalf("call %d: current %+v, v1 %+v", i, d1, d2)
				}
				if d1.Allowed && !bytes.Equal(o1, o2) {
					t.Fatalf("call %d: v1 state rewritten as %x, want %x", i, o2, o1)
				}
				if l.Idle(s, cl.at) != l.Idle(v1Of(s), cl.at) {
					t.Fatalf("call %d: Idle differs between the encodings", i)
				}
				s = o1
			}
		})
	}
}

// TestConvertedIdleAllocs: Idle on a state recorded under other parameters rebuilds the old
// configuration by value and allocates nothing, so the table can probe such slots cheaply.
func TestConvertedIdleAllocs(t *testing.T) {
	bases := changeBases()
	for _, oc := range bases {
		old := mustNew(t, oc)
		s := exhaust(t, old, 1, t0)
		for _, nc := range changesOf(oc) {
			nw := mustNew(t, nc)
			if allocs := testing.AllocsPerRun(100, func() { nw.Idle(s, t0+int64(ms)) }); allocs != 0 {
				t.Errorf("%s reading %s: Idle allocates %v", name(nc), name(oc), allocs)
			}
		}
	}
}

// TestRecordedConfig checks the exported view of the parameter block.
func TestRecordedConfig(t *testing.T) {
	for _, c := range append(allConfigs(), changeBases()...) {
		l := mustNew(t, c)
		_, s := l.AllowN(nil, t0, 1)
		rc, ok := RecordedConfig(s)
		want := Config{Algorithm: c.Algorithm, Variant: c.Variant, Limit: c.Limit, Window: c.Window, Burst: c.Burst, MaxDelay: c.MaxDelay}
		switch c.Algorithm {
		case AlgTokenBucket, AlgLeakyBucket, AlgGCRA:
			want.Burst = c.Capacity()
		case AlgSlidingWindow:
			if want.Variant == "" {
				want.Variant = VariantCounter
			}
		}
		if !ok || rc != want {
			t.Errorf("%s: RecordedConfig %+v, %v; want %+v", name(c), rc, ok, want)
		}
		if _, ok := RecordedConfig(v1Of(s)); ok {
			t.Errorf("%s: a v1 state has a recorded configuration", name(c))
		}
		// A corrupt block (capacity 0) is not a configuration: the state is a fresh key.
		bad := append([]byte(nil), s...)
		put32(bad[5:], 0)
		if _, ok := RecordedConfig(bad); ok {
			t.Errorf("%s: capacity 0 accepted", name(c))
		}
	}
	for _, s := range [][]byte{nil, {verGCRA2}, make([]byte, hdrSize)} {
		if _, ok := RecordedConfig(s); ok {
			t.Errorf("RecordedConfig(%x) ok", s)
		}
	}
}

// TestConfigChangeIdleIsFresh: a key that the old configuration finds idle consumed nothing, so
// after a raised capacity it has the new capacity, and a request costing more than the old
// capacity is admitted. Converting it to R_old instead would deny such a request for as long as
// every request of that key costs as much, because a denial writes nothing.
func TestConfigChangeIdleIsFresh(t *testing.T) {
	for _, base := range changeBases() {
		if base.Algorithm == AlgAdaptive || base.MaxDelay > 0 {
			continue
		}
		raised := base
		raised.Limit *= 3
		if raised.Burst != 0 {
			raised.Burst *= 3
		}
		t.Run(name(base)+"->"+name(raised), func(t *testing.T) {
			old, nw := mustNew(t, base), mustNew(t, raised)
			// One admitted request writes a state recorded under base; a week later it is idle.
			_, s := old.AllowN(nil, t0, 1)
			at := t0 + int64(7*24*time.Hour)
			if !old.Idle(s, at) {
				t.Fatalf("the old configuration does not find its state idle a week later")
			}
			cost := base.Capacity() + 1
			if d, _ := nw.AllowN(s, at, cost); !d.Allowed {
				t.Fatalf("a request of cost %d above the old capacity was denied on an idle key: %+v", cost, d)
			}
			// A key the old configuration still counts keeps what it consumed.
			_, busy := old.AllowN(nil, at, 1)
			if d, _ := nw.AllowN(busy, at, base.Capacity()); d.Allowed {
				t.Fatalf("a key with one unit consumed was granted the old capacity %d again", base.Capacity())
			}
		})
	}
}

// maxDelayEffective returns the longest Delay the shaper can grant: min(MaxDelay, the time to
// drain a full queue, C*Window/Limit), rounded up to whole nanoseconds; 0 for the meter.
func (l *LeakyBucket) maxDelayEffective() time.Duration {
	if !l.shaper {
		return 0
	}
	if l.rD > 0 {
		return dur(l.qD + 1)
	}
	return dur(l.qD)
}
