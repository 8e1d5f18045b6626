package redis_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// settle sends one settlement of delta on the differ's key at now, for a reservation decided
// at reservedAt, with id, and applies the
// same settlement to the Go state when apply is set (a settlement sent again under the same
// id must change nothing in Redis, so Go applies it once). A peek (a decision for 0 events)
// right after compares what both now report.
func (d *differ) settle(now, reservedAt, delta int64, id uint64, apply bool) {
	d.t.Helper()
	d.keepKey()
	s := redis.Settlement{Item: redis.Item{Rule: d.rule, Key: d.key}, Delta: delta, ReservedAt: reservedAt, ID: id}
	d.buf = redis.AppendSettleSHAAt(d.buf[:0], &s, now)
	status, body := d.c.post(d.buf)
	at, err := redis.ParseSettle(status, body)
	if err != nil {
		d.t.Fatalf("%.160q: %v", d.buf, err)
	}
	if at != min(now, algorithms.MaxTime) {
		d.t.Fatalf("settled at %d, asked for %d", at, now)
	}
	if apply {
		if out, ok := algorithms.Settle(d.lim, slices.Clone(d.state), at, reservedAt, delta); ok {
			d.state = append(d.state[:0], out...)
		}
	}
	d.history = append(d.history, step{now: at, n: -delta})
	d.do(now, 0)
}

// TestDifferentialSettle runs the differential sequences of the algorithms that take a usage
// cost, with settlements (refunds and debts, some far beyond the capacity, up to ten windows'
// limit for the windows, some sent twice) between the decisions: every decision after a
// settlement must be the Go limiter's after algorithms.Settle of the same delta at the same
// instant.
func TestDifferentialSettle(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	starts := []int64{1_764_480_000_123_456_789, algorithms.MaxTime - int64(2*60*60*1e9)}
	for ci, cfg := range diffConfigs {
		c := capacity(cfg)
		maxUsage := 4 * c
		if isWindow(cfg) {
			maxUsage = 10 * c
		}
		if algorithms.CheckUsage(cfg, maxUsage) != nil {
			continue
		}
		t.Run(cfgName(cfg), func(t *testing.T) {
			t.Parallel()
			wc := newClient(t, srv.WebdisURL())
			for si, at := range starts {
				r := rand.New(rand.NewPCG(uint64(ci), 100+uint64(si)))
				d := newDiffer(t, wc, cfg, fmt.Sprintf("settle:{%s}:%d", cfgName(cfg), si))
				now := at
				var last algorithms.Decision
				settled, debts, refunds := 0, 0, 0
				for i := 0; i < 300; i++ {
					now = nextNow(r, now, cfg, last)
					if r.IntN(3) > 0 {
						last = d.do(now, nextN(r, cfg))
						continue
					}
					var delta int64
					switch p := r.IntN(10); {
					case p < 4:
						delta = -1 - r.Int64N(c)
					case p < 8:
						delta = 1 + r.Int64N(c)
					default:
						delta = 1 + r.Int64N(maxUsage)
					}
					if delta < 0 {
						refunds++
					} else {
						debts++
					}
					// The reservation was decided at one of the recent steps (in this
					// window, the previous one, or earlier).
					reservedAt := now
					if len(d.history) > 0 {
						reservedAt = d.history[max(0, len(d.history)-1-r.IntN(12))].now
					}
					id := r.Uint64()
					d.settle(now, reservedAt, delta, id, true)
					if r.IntN(5) == 0 {
						d.settle(now+r.Int64N(1000), reservedAt, delta, id, false) // sent again: applied once
					}
					settled++
				}
				if refunds == 0 || debts == 0 || d.counts.allowed == 0 || d.counts.denied == 0 {
					t.Errorf("weak sequence: %d refunds, %d debts, %+v", refunds, debts, d.counts)
				}
			}
		})
	}
}

func isWindow(cfg algorithms.Config) bool {
	return cfg.Algorithm == "fixed_window" || cfg.Algorithm == "sliding_window"
}

// TestSettleLongRunExactWindows is algorithms' TestSettleLongRunExact against Redis, for the
// windows, through the differ (every decision is also the Go limiter's): random reservations
// settled with usages up to 4 times the limit, or on_missing charges, while time moves on by
// 1 to 3 windows whenever the key's count covers what they repay and the open reservations'
// refunds (which then come off the carried debt). What Redis has charged the key, its stored
// count plus the limit per passed window, is then exactly the usage plus the on_missing
// charges.
func TestSettleLongRunExactWindows(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	for _, cfg := range []algorithms.Config{
		{Algorithm: "fixed_window", Limit: 100, Window: time.Hour},
		{Algorithm: "sliding_window", Limit: 100, Window: time.Hour},
	} {
		t.Run(cfg.Algorithm, func(t *testing.T) {
			t.Parallel()
			wc := newClient(t, srv.WebdisURL())
			L, W := cfg.Limit, int64(cfg.Window)
			var totalPassed int64
			for seed := range uint64(8) {
				r := rand.New(rand.NewPCG(seed, 11))
				d := newDiffer(t, wc, cfg, fmt.Sprintf("exact:{%s}:%d", cfg.Algorithm, seed))
				type reservation struct{ n, at int64 }
				var open []reservation
				var want, passed, openUnits int64
				now := int64(1_764_480_000) * 1e9
				now += 54*int64(time.Minute) - now%W // in the windows, where prev weighs a tenth
				for range 150 {
					if k := 1 + r.Int64N(3); r.IntN(6) == 0 && want-passed*L >= k*L+openUnits {
						now += k * W
						passed += k
						continue
					}
					if len(open) == 0 || r.IntN(2) == 0 {
						reserve := 1 + r.Int64N(20)
						if d.do(now, reserve).Allowed {
							open = append(open, reservation{reserve, now})
							openUnits += reserve
							want += reserve
						}
						continue
					}
					i := r.IntN(len(open))
					rs := open[i]
					open = append(open[:i], open[i+1:]...)
					openUnits -= rs.n
					usage := r.Int64N(4*L + 1)
					if r.IntN(4) == 0 { // no usage: on_missing "reserve" or "max"
						usage = rs.n
						if r.IntN(2) == 0 {
							usage = 4 * L
						}
					}
					want += usage - rs.n
					if usage != rs.n {
						d.settle(now, rs.at, usage-rs.n, r.Uint64(), true)
					}
				}
				// A debt of 1 writes the state of now's window.
				d.settle(now, now, 1, r.Uint64(), true)
				want++
				f := hash(t, srv, string(d.key))
				got := f["c"] + passed*L
				if cfg.Algorithm == "sliding_window" && passed > 0 {
					got += f["p"] - L // prev is the last window passed
				}
				if got != want {
					t.Fatalf("seed %d: Redis charged %d (%v, %d windows passed), want %d", seed, got, f, passed, want)
				}
				totalPassed += passed
			}
			if totalPassed < 30 {
				t.Errorf("only %d windows passed", totalPassed)
			}
		})
	}
}

// TestSettleDebtConverted: a window key in debt, read under a raised limit, converts without
// grant in Redis as in Go (every decision is compared): nothing is left while the old
// configuration still carries the debt, the whole new limit once it is repaid.
func TestSettleDebtConverted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	wc := newClient(t, srv.WebdisURL())
	for _, alg := range []string{"fixed_window", "sliding_window"} {
		W := int64(time.Hour)
		key := "convert:{" + alg + "}"
		old := newDiffer(t, wc, algorithms.Config{Algorithm: alg, Limit: 10, Window: time.Duration(W)}, key)
		now := int64(1_764_480_000) * 1e9
		now -= now % W
		old.do(now, 5)
		old.settle(now, now, 25, 1, true) // 30 counted
		cur := newDiffer(t, wc, algorithms.Config{Algorithm: alg, Limit: 20, Window: time.Duration(W)}, key)
		cur.state = old.state
		for k := range int64(5) {
			if d := cur.do(now+k*W, 20); d.Allowed != (k == 4 || k == 3 && alg == "fixed_window") {
				t.Errorf("%s, %d windows on: %+v", alg, k, d)
			}
		}
	}
}

// hash returns the integer fields of the hash at key.
func hash(t *testing.T, srv *redistest.Server, key string) map[string]int64 {
	t.Helper()
	arr, _ := mustDo(t, srv, "HGETALL", key).([]any)
	f := map[string]int64{}
	for k := 0; k+1 < len(arr); k += 2 {
		if v, err := strconv.ParseInt(fmt.Sprint(arr[k+1]), 10, 64); err == nil {
			f[fmt.Sprint(arr[k])] = v
		}
	}
	return f
}

// TestSettleWritesNothing: a settlement writes nothing on a key recorded under other
// parameters (the rule changed while the stream was open), and malformed settlement
// arguments are refused.
func TestSettleWritesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	c := newClient(t, srv.WebdisURL())
	const now = 1_764_480_000_000_000_000
	old := algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: 1e9}
	cur := algorithms.Config{Algorithm: "token_bucket", Limit: 20, Window: 1e9}
	key := []byte("settle:{x}:k")
	c.mustCall(mustRule(t, old).AppendEvalSHAAt(nil, key, 3, now))
	before := mustDo(t, srv, "HGETALL", string(key))
	s := redis.Settlement{Item: redis.Item{Rule: mustRule(t, cur), Key: key}, Delta: 5, ReservedAt: now, ID: 1}
	if _, err := redis.ParseSettle(c.post(redis.AppendSettleSHAAt(nil, &s, now))); err != nil {
		t.Fatal(err)
	}
	if after := mustDo(t, srv, "HGETALL", string(key)); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a key of other parameters was settled: %v, was %v", after, before)
	}
	// The same settlement under the key's own parameters is written.
	s.Item.Rule, s.ID = mustRule(t, old), 2
	if _, err := redis.ParseSettle(c.post(redis.AppendSettleSHAAt(nil, &s, now))); err != nil {
		t.Fatal(err)
	}
	if after := mustDo(t, srv, "HGETALL", string(key)); fmt.Sprint(after) == fmt.Sprint(before) {
		t.Errorf("the settlement was not written: %v", after)
	}
	body := string(redis.AppendSettleSHAAt(nil, &s, now))
	for _, bad := range []string{
		strings.Replace(body, "/s/5/0/", "/s/x/0/", 1),
		strings.Replace(body, "/s/5/0/", "/s/5/2/", 1),
		strings.Replace(body, "/s/5/0/", "/s/5/0/-1/", 1),
		strings.Replace(body, "/2/", "/1/", 1),
	} {
		if _, err := redis.ParseSettle(c.post([]byte(bad))); !errors.Is(err, redis.ErrRedis) {
			t.Errorf("%.200s: %v, want a Redis error", bad, err)
		}
	}
}

// TestSettleKeyBound: a settlement on a key of a bounded rule that no longer exists (it
// expired or was evicted while the stream was open) is treated as a new key, as a decision
// treats it: while the rule has max_keys live keys, a debt goes to the overflow key and a
// refund settles nothing, so the key set never holds more than max_keys live keys; below the
// bound, the key is written and tracked, and the expired members leave the key set. It uses
// Redis' own clock, because keys expire on it.
func TestSettleKeyBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	c := newClient(t, srv.WebdisURL())
	cfg := algorithms.Config{Algorithm: "gcra", Limit: 1, Window: time.Hour}
	rule := mustRule(t, cfg).Bounded(3, "rl", "d", "s")
	const set, over = "rl:{d}:s:#keys", "rl:{d}:s:#overflow"
	key := func(name string) []byte { return redis.AppendKey(nil, "rl", "d", "s", []byte(name)) }
	for i := range 3 {
		if a := callOne(t, c, redis.Item{Rule: rule, Key: key("client-" + strconv.Itoa(i)), N: 1}); !a.Decision.Allowed || a.Overflow {
			t.Fatalf("client %d, within the bound: %+v", i, a)
		}
	}
	settle := func(r *redis.Rule, k []byte, delta int64, id uint64) {
		t.Helper()
		s := redis.Settlement{Item: redis.Item{Rule: r, Key: k}, Delta: delta, ReservedAt: time.Now().UnixNano(), ID: id}
		if _, err := redis.ParseSettle(c.post(redis.AppendSettleSHA(nil, &s))); err != nil {
			t.Fatal(err)
		}
	}
	// A debt on a key not in the full key set: charged on the overflow key.
	gone := key("gone")
	settle(rule, gone, 1, 1)
	if n := srv.Int("ZCARD", set); n != 3 {
		t.Errorf("a debt on a key outside the full key set: the set holds %d keys, want 3", n)
	}
	if srv.Int("EXISTS", string(gone)) != 0 || srv.Int("EXISTS", over) != 1 {
		t.Errorf("the debt was not settled on the overflow key: %v", srv.Keys())
	}
	// A refund there settles nothing at all.
	before := fmt.Sprint(mustDo(t, srv, "HGETALL", over))
	settle(rule, key("gone-too"), -1, 2)
	if n := srv.Int("ZCARD", set); n != 3 {
		t.Errorf("a refund on a key outside the full key set: the set holds %d keys, want 3", n)
	}
	if after := fmt.Sprint(mustDo(t, srv, "HGETALL", over)); after != before || srv.Int("EXISTS", string(key("gone-too"))) != 0 {
		t.Errorf("a refund on a key outside the full key set wrote: overflow %s, was %s; keys %v", after, before, srv.Keys())
	}
	// A key in the set keeps its own settlement.
	own := key("client-0")
	before = fmt.Sprint(mustDo(t, srv, "HGETALL", string(own)))
	settle(rule, own, 1, 3)
	if after := fmt.Sprint(mustDo(t, srv, "HGETALL", string(own))); after == before {
		t.Errorf("a debt on a tracked key was not settled on it: %s", after)
	}
	if n := srv.Int("ZCARD", set); n != 3 {
		t.Errorf("the key set holds %d keys after a tracked key's settlement, want 3", n)
	}
	// Below the bound (one live key, one expired member), a debt on a missing key writes it,
	// tracks it, and drops the expired member.
	small := mustRule(t, cfg).Bounded(2, "rl", "d", "t")
	const smallSet = "rl:{d}:t:#keys"
	callOne(t, c, redis.Item{Rule: small, Key: key("live"), N: 1})
	mustDo(t, srv, "ZADD", smallSet, "1", "expired")
	back := key("back")
	settle(small, back, 1, 4)
	if srv.Int("EXISTS", string(back)) != 1 {
		t.Errorf("a debt below the bound did not write its key: %v", srv.Keys())
	}
	live := srv.Int("ZCOUNT", smallSet, "("+strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf")
	if n := srv.Int("ZCARD", smallSet); n != 2 || live != 2 {
		t.Errorf("the key set holds %d members, %d live, want 2 live (the live key and the settled one)", n, live)
	}
}
