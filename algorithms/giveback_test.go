package algorithms

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// returners are the limiters a lease applies to, as Returners.
func returners(t *testing.T) map[string]Limiter {
	t.Helper()
	m := map[string]Limiter{}
	for name, c := range map[string]Config{
		"token_bucket":   {Algorithm: "token_bucket", Limit: 10, Window: time.Second, Burst: 20},
		"leaky_bucket":   {Algorithm: "leaky_bucket", Limit: 10, Window: time.Second},
		"gcra":           {Algorithm: "gcra", Limit: 10, Window: time.Second, Burst: 5},
		"fixed_window":   {Algorithm: "fixed_window", Limit: 10, Window: time.Second},
		"sliding_window": {Algorithm: "sliding_window", Limit: 10, Window: time.Second},
	} {
		lim, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := lim.(Returner); !ok {
			t.Fatalf("%s is no Returner", name)
		}
		m[name] = lim
	}
	return m
}

// TestGiveBackUndoesATake: units taken and given back at the same instant leave a state that
// decides every later request as the state before the take: a give-back returns exactly what
// the take debited while the units still weigh in the state, and never more.
func TestGiveBackUndoesATake(t *testing.T) {
	for name, lim := range returners(t) {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			ret := lim.(Returner)
			checked := 0
			for range 600 {
				// A random state: random requests over a second or two.
				var state []byte
				now := int64(1_764_480_000_000_000_000)
				for range r.IntN(30) {
					now += r.Int64N(int64(200 * time.Millisecond))
					if d, next := lim.AllowN(slices.Clone(state), now, 1+r.Int64N(3)); d.Allowed {
						state = next
					}
				}
				n := 1 + r.Int64N(6)
				d, taken := lim.AllowN(slices.Clone(state), now, n)
				if !d.Allowed {
					continue
				}
				back, changed := ret.GiveBack(slices.Clone(taken), now, now, n)
				if !changed {
					t.Fatalf("a take of %d given back at once changed nothing", n)
				}
				checked++
				// Later requests decide alike on both.
				a, b := slices.Clone(state), back
				at := now
				for range 20 {
					at += r.Int64N(int64(300 * time.Millisecond))
					k := 1 + r.Int64N(4)
					da, na := lim.AllowN(slices.Clone(a), at, k)
					db, nb := lim.AllowN(slices.Clone(b), at, k)
					if da != db {
						t.Fatalf("after a take of %d given back: %+v, without the take: %+v", n, db, da)
					}
					if da.Allowed {
						a, b = na, nb
					}
				}
			}
			if checked < 100 {
				t.Fatalf("weak test: %d takes checked", checked)
			}
		})
	}
}

// TestGiveBackTakesOnlyWhatWeighs: units of a window that has ended are not given back to
// the next window; a state that holds no debit takes nothing back; a fresh or foreign state
// is left as it is.
func TestGiveBackTakesOnlyWhatWeighs(t *testing.T) {
	lims := returners(t)
	sec := int64(time.Second)
	start := int64(1_764_480_000) * sec
	fw := lims["fixed_window"].(Returner)
	_, s := lims["fixed_window"].AllowN(nil, start+sec/2, 5)
	if _, changed := fw.GiveBack(slices.Clone(s), start+sec+1, start+sec/2, 5); changed {
		t.Error("fixed_window: units of the window before given back to the next")
	}
	sw := lims["sliding_window"].(Returner)
	_, s = lims["sliding_window"].AllowN(nil, start+sec/2, 5)
	back, changed := sw.GiveBack(slices.Clone(s), start+sec+sec/2, start+sec/2, 5)
	if !changed {
		t.Error("sliding_window: units still weighing as the previous window's were not given back")
	}
	if d, _ := lims["sliding_window"].AllowN(back, start+sec+sec/2, 10); !d.Allowed {
		t.Errorf("sliding_window: the previous window's units still count: %+v", d)
	}
	if _, changed := sw.GiveBack(slices.Clone(s), start+3*sec, start+sec/2, 5); changed {
		t.Error("sliding_window: units of a window two back given back")
	}
	for name, lim := range lims {
		ret := lim.(Returner)
		if _, changed := ret.GiveBack(nil, start, start, 3); changed {
			t.Errorf("%s: a fresh key took units back", name)
		}
		_, full := lim.AllowN(nil, start, 1)
		// Long after, the state holds no debit any more.
		if _, changed := ret.GiveBack(slices.Clone(full), start+100*sec, start, 1); changed {
			t.Errorf("%s: a state holding no debit took units back", name)
		}
		if _, changed := ret.GiveBack([]byte{0x13, 1, 2}, start, start, 1); changed {
			t.Errorf("%s: a foreign state took units back", name)
		}
	}
	shaper, err := New(Config{Algorithm: "leaky_bucket", Limit: 10, Window: time.Second, MaxDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, s = shaper.AllowN(nil, start, 3)
	if _, changed := shaper.(Returner).GiveBack(s, start, start, 3); changed {
		t.Error("the shaper's schedule took units back")
	}
}
