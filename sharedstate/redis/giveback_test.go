package redis_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

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

// doGiveBack is do for a request that first gives back g units taken at takenAt.
func (d *differ) doGiveBack(ret algorithms.Returner, now, n, g, takenAt int64) (algorithms.Decision, bool) {
	d.t.Helper()
	items := []redis.Item{{Rule: d.rule, Key: d.key, N: n, GiveBack: g, GivenAt: max(takenAt, 0)}}
	d.buf = redis.AppendEvalSHAItemsAt(d.buf[:0], items, now)
	status, body := d.c.post(d.buf)
	var answers [1]redis.Answer
	_, _, err := redis.ParseReplies(status, body, items, answers[:])
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
