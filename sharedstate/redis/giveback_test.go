package redis_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// TestDifferentialGiveBack extends the differential test to a lease's give-back: random
// sequences of requests, some of which give back units of an earlier admitted take (a random
// amount, taken at the instant of an earlier admission, or a random one), must get the same
// decisions from the script and from the Go limiter with algorithms.Returner's GiveBack, also
// when the request itself is denied (the script then writes the given-back state alone).
func TestDifferentialGiveBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := srv.WebdisURL()
	for ci, cfg := range diffConfigs {
		if cfg.Variant == "log" {
			continue // the log takes no lease
		}
		t.Run(cfgName(cfg), func(t *testing.T) {
			t.Parallel()
			c := newClient(t, url)
			d := newDiffer(t, c, cfg, fmt.Sprintf("giveback:{%s}", cfgName(cfg)))
			ret := d.lim.(algorithms.Returner)
			r := rand.New(rand.NewPCG(uint64(ci), 77))
			now := int64(1_764_480_000_123_456_789)
			var last algorithms.Decision
			var taken []int64 // instants of admissions
			gave := 0
			for range 400 {
				now = nextNow(r, now, cfg, last)
				n := nextN(r, cfg)
				if len(taken) == 0 || r.IntN(3) > 0 {
					last = d.do(now, n)
				} else {
					at := taken[r.IntN(len(taken))]
					if r.IntN(8) == 0 {
						at = now - r.Int64N(int64(cfg.Window)*2+1)
					}
					g := 1 + r.Int64N(capacity(cfg)+1)
					var changed bool
					last, changed = d.doGiveBack(ret, now, n, g, at)
					if changed {
						gave++
					}
				}
				if last.Allowed {
					taken = append(taken, now)
				}
			}
			if gave == 0 {
				t.Errorf("weak sequence: no give-back changed a state (%+v)", d.counts)
			}
			t.Logf("%+v, %d give-backs", d.counts, gave)
		})
	}
}

// A lease's give-back on a window key that carries a usage debt from an ended window (a rule
// that took a usage cost, then a lease under the same parameters): the script and the Go
// limiter must agree that it applies, forgive none of the debt, and keep the carry, so that a
// later refund of the ended window's reservation still comes off it.
func TestDifferentialGiveBackOnCarriedDebt(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(t, srv)
	w := int64(time.Hour)
	for _, tc := range []struct {
		cfg   algorithms.Config
		reset time.Duration // the peek's ResetAfter after the refund: count 5 left
	}{
		{algorithms.Config{Algorithm: "fixed_window", Limit: 10, Window: time.Hour}, time.Hour - 13},
		{algorithms.Config{Algorithm: "sliding_window", Limit: 10, Window: time.Hour}, 2*time.Hour - 13},
	} {
		t.Run(tc.cfg.Algorithm, func(t *testing.T) {
			d := newDiffer(t, newClient(t, srv.WebdisURL()), tc.cfg, "gbcarry:{"+tc.cfg.Algorithm+"}")
			now := int64(1_764_480_000_000_000_000) / w * w
			if !d.do(now, 5).Allowed {
				t.Fatal("first request denied")
			}
			d.settle(now+1, now, 25, 1, true) // count 30: a debt of 20 in this window
			now2 := now + w + 10
			d.settle(now2, now, 1, 2, true) // the ended window's debt: count 21, carry 21
			dec, changed := d.doGiveBack(d.lim.(algorithms.Returner), now2+1, 1, 1, now2)
			if !changed || dec.Allowed {
				t.Fatalf("a give-back of 1 on a debt of 11 beyond the limit: changed %v, %+v", changed, dec)
			}
			d.settle(now2+2, now, -15, 3, true) // a refund of the ended window: off the carry of 20
			if dec := d.do(now2+3, 0); dec.ResetAfter != tc.reset {
				t.Fatalf("after the refund: %+v, want ResetAfter %v (count 5)", dec, tc.reset)
			}
		})
	}
}

// The same in the window the debt was charged in (no carry yet): a give-back of 1 must not
// take the count from 30 down to 9.
func TestGiveBackOnDebtInItsWindow(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(t, srv)
	cfg := algorithms.Config{Algorithm: "fixed_window", Limit: 10, Window: time.Hour}
	d := newDiffer(t, newClient(t, srv.WebdisURL()), cfg, "gbdebt:{x}")
	w := int64(time.Hour)
	now := int64(1_764_480_000_000_000_000) / w * w
	if !d.do(now, 5).Allowed {
		t.Fatal("first request denied")
	}
	d.settle(now+1, now, 25, 1, true) // count 30: a debt of 20 in this window
	dec, changed := d.doGiveBack(d.lim.(algorithms.Returner), now+2, 1, 1, now)
	if !changed || dec.Allowed || dec.ResetAfter != time.Duration(3*w-2) {
		t.Fatalf("a give-back of 1 (changed %v) on a debt of 20: %+v, want count 29", changed, dec)
	}
}

// doGiveBack is do for a request that first gives back g units taken at takenAt.
func (d *differ) doGiveBack(ret algorithms.Returner, now, n, g, takenAt int64) (algorithms.Decision, bool) {
	d.t.Helper()
	items := []redis.Item{{Rule: d.rule, Key: d.key, N: n, GiveBack: g, GivenAt: max(takenAt, 0)}}
	d.buf = redis.AppendEvalSHAItemsAt(d.buf[:0], items, now)
	status, body := d.c.post(d.buf)
	var answers [1]redis.Answer
	_, _, err := redis.ParseReplies(status, body, redis.TestCallID, items, answers[:])
	if errors.Is(err, redis.ErrNoScript) {
		d.t.Fatalf("script not loaded")
	}
	if err != nil {
		d.t.Fatalf("%.120q: %v (status %d, body %.200q)", d.buf, err, status, body)
	}
	rep := answers[0]
	given, changed := ret.GiveBack(slices.Clone(d.state), rep.Now, max(takenAt, 0), g)
	if changed != rep.GaveBack {
		// The filter counts the units returned or dropped from the script's answer.
		d.t.Fatalf("give-back applied differs at step %d (now=%d n=%d, gave %d taken at %d): go %v, lua %v",
			len(d.history), rep.Now, n, g, takenAt, changed, rep.GaveBack)
	}
	goD, newState := d.lim.AllowN(slices.Clone(given), rep.Now, n)
	d.history = append(d.history, step{now: rep.Now, n: n, goD: goD, luaD: rep.Decision})
	if goD != rep.Decision {
		d.t.Fatalf("decisions differ at step %d (now=%d n=%d, gave %d taken at %d, changed %v):\n  go  %+v\n  lua %+v",
			len(d.history)-1, rep.Now, n, g, takenAt, changed, goD, rep.Decision)
	}
	switch {
	case goD.Allowed:
		d.state = append(d.state[:0], newState...)
		d.counts.allowed++
	case changed:
		d.state = append(d.state[:0], given...)
		d.counts.denied++
	default:
		d.counts.denied++
	}
	return goD, changed
}
