package redis_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// The tests in this file hold the promise that a configuration change never grants allowance
// (see doc.go, "The script", and lua/main.lua): a key records the parameters it was written under,
// and a key read under other parameters is converted at the decision time to the new
// algorithm's state of a key with R = min(R_old, capacity_new) left, where R_old is what the
// old parameters report as remaining at that instant.

// decide runs one decision of rule on key for n events at now (Unix ns, Redis' clock replaced).
func decide(t *testing.T, c *webdisClient, rule *redis.Rule, key string, n, now int64) algorithms.Decision {
	t.Helper()
	rep, err := c.call(rule.AppendEvalSHAAt(nil, []byte(key), n, now))
	if errors.Is(err, redis.ErrNoScript) {
		rep, err = c.call(rule.AppendEvalAt(nil, []byte(key), n, now))
	}
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return rep.Decision
}

// burst sends up to max requests of n events at now and returns how many were admitted; it
// stops at the first denial.
func burst(t *testing.T, c *webdisClient, rule *redis.Rule, key string, n, now int64, max int) int {
	t.Helper()
	for i := range max {
		if !decide(t, c, rule, key, n, now).Allowed {
			return i
		}
	}
	return max
}

// TestConfigChangeTable is the table of the specification, row by row.
func TestConfigChangeTable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	now := int64(1_764_480_000_000_000_000)
	cfg := func(algo string, limit int64, window time.Duration) algorithms.Config {
		return algorithms.Config{Algorithm: algo, Limit: limit, Window: window}
	}
	for _, row := range []struct {
		before algorithms.Config
		used   int // requests admitted before the change; -1: until denied
		after  algorithms.Config
		next   int // admitted after the change
	}{
		{cfg("token_bucket", 11, time.Hour), 10, cfg("token_bucket", 10, time.Hour), 1},
		{cfg("token_bucket", 10, time.Hour), 5, cfg("token_bucket", 10, 30*time.Minute), 5},
		{cfg("gcra", 10, time.Hour), -1, cfg("gcra", 10, 2*time.Hour), 0},
		{cfg("leaky_bucket", 10, time.Hour), -1, cfg("leaky_bucket", 10, 2*time.Hour), 0},
		{cfg("gcra", 10, time.Hour), -1, cfg("gcra", 5, 2*time.Hour), 0},
	} {
		name := cfgName(row.before) + "->" + cfgName(row.after)
		t.Run(name, func(t *testing.T) {
			key := "change:{t}:" + name
			before, after := mustRule(t, row.before), mustRule(t, row.after)
			max := row.used
			if max < 0 {
				max = 1000
			}
			used := burst(t, c, before, key, 1, now, max)
			if row.used >= 0 && used != row.used {
				t.Fatalf("admitted %d before the change, want %d", used, row.used)
			}
			if got := burst(t, c, after, key, 1, now+int64(time.Millisecond), 100); got != row.next {
				t.Fatalf("after the change %d admitted, want %d", got, row.next)
			}
			// The key now records the new parameters (it was written by an admission), or
			// still the old ones (nothing was admitted, so nothing was written).
			want := cfgString(row.after)
			if row.next == 0 {
				want = cfgString(row.before)
			}
			if got := srv.MustDo("HGET", key, "cfg"); got != want {
				t.Errorf("the key records %v, want %s", got, want)
			}
		})
	}
}

// cfgString is the parameter record a key holds: "code:limit:window ns:capacity".
func cfgString(c algorithms.Config) string {
	code := map[string]int{"token_bucket": 1, "leaky_bucket": 2, "sliding_window": 3, "fixed_window": 5, "gcra": 6}[c.Algorithm]
	if c.Variant == "log" {
		code = 4
	}
	return fmt.Sprintf("%d:%d:%d:%d", code, c.Limit, int64(c.Window), capacity(c))
}

// TestConfigChangeEveryPair changes every configuration into every other one (limit up and
// down, window up and down, burst up and down, variant, algorithm) after some or all of the
// allowance was used (or none, so the key was never written), and checks that the new configuration admits exactly
// min(R_old, capacity_new) at the instant of the change, where R_old is what the old
// configuration reports as remaining then; and, with a cost of 3 per request, a third of that.
func TestConfigChangeEveryPair(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	cfgs := []algorithms.Config{
		{Algorithm: "token_bucket", Limit: 10, Window: time.Hour},
		{Algorithm: "token_bucket", Limit: 10, Window: time.Hour, Burst: 4},
		{Algorithm: "token_bucket", Limit: 10, Window: time.Hour, Burst: 25},
		{Algorithm: "token_bucket", Limit: 20, Window: time.Hour},
		{Algorithm: "token_bucket", Limit: 10, Window: 30 * time.Minute},
		{Algorithm: "leaky_bucket", Limit: 10, Window: time.Hour},
		{Algorithm: "leaky_bucket", Limit: 7, Window: 2 * time.Hour},
		{Algorithm: "gcra", Limit: 10, Window: time.Hour},
		{Algorithm: "gcra", Limit: 10, Window: time.Hour, Burst: 3},
		{Algorithm: "gcra", Limit: 5, Window: 2 * time.Hour},
		{Algorithm: "fixed_window", Limit: 10, Window: time.Hour},
		{Algorithm: "fixed_window", Limit: 5, Window: time.Hour},
		{Algorithm: "fixed_window", Limit: 10, Window: 2 * time.Hour},
		{Algorithm: "sliding_window", Limit: 10, Window: time.Hour},
		{Algorithm: "sliding_window", Limit: 15, Window: 20 * time.Minute},
		{Algorithm: "sliding_window", Variant: "log", Limit: 10, Window: time.Hour},
		{Algorithm: "sliding_window", Variant: "log", Limit: 6, Window: 30 * time.Minute},
	}
	rules := make([]*redis.Rule, len(cfgs))
	for i, cfg := range cfgs {
		rules[i] = mustRule(t, cfg)
	}
	t0 := int64(1_764_480_000_000_000_000) + int64(17*time.Minute)
	t1 := t0 + int64(7*time.Minute) + 12345
	// One subtest per old configuration, in parallel, each on keys of its own.
	for i, a := range cfgs {
		t.Run(cfgName(a), func(t *testing.T) {
			t.Parallel()
			c := newClient(t, srv.WebdisURL())
			for j, b := range cfgs {
				if i == j {
					continue
				}
				for _, used := range []int{0, 3, 1000} {
					for _, cost := range []int64{1, 3} {
						key := fmt.Sprintf("pair:{t}:%d:%d:%d:%d", i, j, used, cost)
						burst(t, c, rules[i], key, 1, t0, used)
						rOld := decide(t, c, rules[i], key, 0, t1).Remaining
						want := int(min(rOld, capacity(b)) / cost)
						if used == 0 {
							// Nothing was ever stored: a fresh key has the full allowance under
							// any configuration.
							want = int(capacity(b) / cost)
						}
						if got := burst(t, c, rules[j], key, cost, t1, 100); got != want {
							t.Errorf("%s (used %d) -> %s at cost %d: %d admitted, want %d (R_old %d)",
								cfgName(a), used, cfgName(b), cost, got, want, rOld)
						}
					}
				}
			}
		})
	}
}

// TestConfigUnchangedKeepsState checks that a key read under the parameters it records is not
// converted: a rule whose state is partly used keeps deciding exactly as before (the
// differential tests compare every decision with Go's), and the state is not rewritten by a
// denial.
func TestConfigUnchangedKeepsState(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	now := int64(1_764_480_000_000_000_000)
	rule := mustRule(t, algorithms.Config{Algorithm: "sliding_window", Limit: 4, Window: time.Minute})
	// Two in the previous window, so a conversion (which zeroes prev) would be visible.
	key := "same:{t}:k"
	burst(t, c, rule, key, 1, now-int64(time.Minute), 2)
	d := decide(t, c, rule, key, 0, now)
	if got := burst(t, c, rule, key, 1, now, 10); int64(got) != d.Remaining {
		t.Fatalf("admitted %d, the unchanged rule reported %d remaining", got, d.Remaining)
	}
}
