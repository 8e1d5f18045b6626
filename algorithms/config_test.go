package algorithms

import (
	"cmp"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNewErrors(t *testing.T) {
	tb := Config{Algorithm: AlgTokenBucket, Limit: 10, Window: time.Second}
	with := func(c Config, f func(*Config)) Config { f(&c); return c }
	cases := []struct {
		c     Config
		field string
		msg   string // substring of the message
	}{
		{Config{Limit: 1, Window: time.Second}, "algorithm", "missing"},
		{Config{Algorithm: "foo", Limit: 1, Window: time.Second}, "algorithm", `unknown "foo" (want one of token_bucket, leaky_bucket, sliding_window, fixed_window, gcra, adaptive)`},
		{with(tb, func(c *Config) { c.Limit = -3 }), "limit", "must be > 0, got -3"},
		{with(tb, func(c *Config) { c.Limit = 0 }), "limit", "must be > 0, got 0"},
		{with(tb, func(c *Config) { c.Limit = LimitCeiling + 1 }), "limit", "must be <= 1000000000"},
		{with(tb, func(c *Config) { c.Window = 0 }), "window", "must be >= 1ms, got 0s"},
		{with(tb, func(c *Config) { c.Window = 999 * time.Microsecond }), "window", "must be >= 1ms"},
		{with(tb, func(c *Config) { c.Window = 32 * 24 * time.Hour }), "window", "must be <= 744h0m0s (31 days)"},
		{with(tb, func(c *Config) { c.Window = 1500 * time.Microsecond }), "window", "whole number of milliseconds, got 1.5ms"},
		{with(tb, func(c *Config) { c.Burst = -1 }), "burst", "must be in [0, 1000000000]"},
		{with(tb, func(c *Config) { c.Variant = "log" }), "variant", `only sliding_window has variants, got "log"`},
		{with(tb, func(c *Config) { c.MaxDelay = time.Second }), "max_delay", "only leaky_bucket"},
		{with(tb, func(c *Config) { c.MinLimit = 1 }), "min_limit", "only adaptive"},
		{with(tb, func(c *Config) { c.ErrorThreshold = 0.5 }), "error_threshold", "only adaptive"},
		// 2503 per hour: 2503 is coprime with 3.6e12, so capacity × window/gcd exceeds 2^53.
		{with(tb, func(c *Config) { c.Limit = 2503; c.Window = time.Hour }), "limit", "exceeds 2^53"},
		{with(tb, func(c *Config) { c.Burst = 1_000_000_000; c.Window = time.Hour }), "burst", "exceeds 2^53"},
		{Config{Algorithm: AlgFixedWindow, Limit: 1, Window: time.Second, Burst: 2}, "burst", "not used by fixed_window"},
		{Config{Algorithm: AlgSlidingWindow, Limit: 1, Window: time.Second, Variant: "exact"}, "variant", `unknown "exact" (want "counter" or "log")`},
		{Config{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 1025, Window: time.Second}, "limit", "must be <= 1024 for the sliding window log"},
		{Config{Algorithm: AlgLeakyBucket, Limit: 1, Window: time.Second, MaxDelay: -1}, "max_delay", "must be >= 0"},
		{Config{Algorithm: AlgLeakyBucket, Limit: 1, Window: time.Second, MaxDelay: 800 * time.Hour}, "max_delay", "must be <= 744h0m0s"},
		{Config{Algorithm: AlgGCRA, Limit: 2_000_000, Window: time.Millisecond}, "limit", "window/limit >= 1ns"},
		{Config{Algorithm: AlgGCRA, Limit: 1, Window: MaxWindow, Burst: 4}, "burst", "exceeds 2^53"},
		{Config{Algorithm: AlgAdaptive, Limit: 10, Window: time.Second, ErrorThreshold: 0.1}, "min_limit", "must be >= 1, got 0"},
		{Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 11, Window: time.Second, ErrorThreshold: 0.1}, "min_limit", "must be <= limit (10), got 11"},
		{Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 1, MaxLimit: 5, Window: time.Second, ErrorThreshold: 0.1}, "max_limit", "must be >= limit (10), got 5"},
		{Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 1, Window: time.Second}, "target_latency", "needs a health signal"},
		{Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 1, Window: time.Second, ErrorThreshold: 1.5}, "error_threshold", "fraction in [0, 1]"},
		{Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 1, Window: time.Second, TargetLatency: -1}, "target_latency", "must be >= 0"},
		{Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 1, Window: time.Second, TargetLatency: ms, DecreaseFactor: 1}, "decrease_factor", "must be in (0, 1)"},
		{Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 1, Window: time.Second, TargetLatency: ms, IncreaseStep: -2}, "increase_step", "must be in [0, "},
		{Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 1, Window: time.Second, TargetLatency: ms, MinSamples: -2}, "min_samples", "must be >= 0"},
		{Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 1, Window: time.Second, TargetLatency: ms, AdjustInterval: time.Microsecond}, "adjust_interval", "must be >= 1ms"},
		{Config{Algorithm: AlgAdaptive, Limit: 10, MinLimit: 1, Window: time.Second, TargetLatency: ms, Burst: 3}, "burst", "not used by adaptive"},
	}
	for _, tc := range cases {
		_, err := New(tc.c)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("New(%+v) = %v, want a *ConfigError for %s", tc.c, err, tc.field)
			continue
		}
		if ce.Field != tc.field || !strings.Contains(ce.Message, tc.msg) || err.Error() != ce.Field+": "+ce.Message {
			t.Errorf("New(%+v):\n got %q\nwant field %q with %q", tc.c, err, tc.field, tc.msg)
		}
	}
}

func TestNewAccepts(t *testing.T) {
	for _, c := range []Config{
		{Algorithm: AlgTokenBucket, Limit: 2500, Window: time.Hour},
		{Algorithm: AlgTokenBucket, Limit: LimitCeiling, Window: time.Second, Burst: LimitCeiling},
		{Algorithm: AlgTokenBucket, Limit: 1, Window: MaxWindow},
		{Algorithm: AlgLeakyBucket, Limit: 1000, Window: time.Minute, MaxDelay: MaxWindow},
		{Algorithm: AlgSlidingWindow, Limit: LimitCeiling, Window: MaxWindow},
		{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: LogLimitCeiling, Window: MaxWindow},
		{Algorithm: AlgFixedWindow, Limit: LimitCeiling, Window: MaxWindow},
		{Algorithm: AlgGCRA, Limit: 7, Window: time.Second},
		{Algorithm: AlgGCRA, Limit: 1_000_000, Window: time.Millisecond},
		{Algorithm: AlgAdaptive, Limit: 100, MinLimit: 1, MaxLimit: 200, Window: time.Second, TargetLatency: 50 * ms, ErrorThreshold: 0.05},
	} {
		l, err := New(c)
		if err != nil {
			t.Errorf("New(%+v): %v", c, err)
			continue
		}
		// The extremes must work without overflow: a fresh key, then a burst, then a wait.
		var state []byte
		for _, at := range []int64{t0, t0, t0 + int64(c.Window)/3, MaxTime, MaxTime} {
			d, s := l.AllowN(state, at, 1)
			state = s
			if d.Remaining < 0 || d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0 {
				t.Errorf("%+v at %d: %+v", c, at, d)
			}
		}
	}
}

func TestUnsatisfiable(t *testing.T) {
	for _, c := range allConfigs() {
		l := mustNew(t, c)
		capacity := capacityOfLimiter(l)
		for _, n := range []int64{0, -1, -1 << 62, capacity + 1, 1 << 62} {
			in := []byte{1, 2, 3}
			d, out := l.AllowN(in, t0, n)
			if !d.Unsatisfiable() || d.Allowed || d.RetryAfter != 0 || &out[0] != &in[0] || len(out) != 3 {
				t.Errorf("%s n=%d: %+v, state %v; want unsatisfiable and the input state back", name(c), n, d, out)
			}
		}
		d, _ := l.AllowN(nil, t0, capacity)
		if !d.Allowed {
			t.Errorf("%s: a fresh key denies n = capacity = %d: %+v", name(c), capacity, d)
		}
	}
}

// TestCapacity pins the one capacity rule (burst, else limit) that the limiters, the config
// parser and the Redis script arguments share, against what a fresh key really admits.
func TestCapacity(t *testing.T) {
	for _, c := range []Config{
		{Algorithm: AlgTokenBucket, Limit: 10, Window: time.Second},
		{Algorithm: AlgTokenBucket, Limit: 10, Window: time.Second, Burst: 3},
		{Algorithm: AlgGCRA, Limit: 10, Window: time.Second, Burst: 25},
		{Algorithm: AlgLeakyBucket, Limit: 10, Window: time.Second, Burst: 4},
		{Algorithm: AlgFixedWindow, Limit: 7, Window: time.Second},
		{Algorithm: AlgSlidingWindow, Variant: VariantLog, Limit: 7, Window: time.Second},
	} {
		want, field := c.Limit, "limit"
		if c.Burst != 0 {
			want, field = c.Burst, "burst"
		}
		if got := c.Capacity(); got != want {
			t.Fatalf("%+v: Capacity() = %d, want %d", c, got, want)
		}
		if got := c.CapacityField(); got != field {
			t.Fatalf("%+v: CapacityField() = %q, want %q", c, got, field)
		}
		l, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		now := int64(time.Hour)
		if d, _ := l.AllowN(nil, now, c.Capacity()); !d.Allowed {
			t.Fatalf("%+v: a fresh key denies Capacity() = %d at once: %+v", c, c.Capacity(), d)
		}
		if d, _ := l.AllowN(nil, now, c.Capacity()+1); !d.Unsatisfiable() {
			t.Fatalf("%+v: a fresh key does not refuse Capacity()+1 = %d as unsatisfiable: %+v", c, c.Capacity()+1, d)
		}
	}
}

// TestGCD checks Euclid's algorithm on the cases the rate reductions meet: coprime values,
// a zero operand and a divisor of the other operand.
func TestGCD(t *testing.T) {
	for _, tc := range [][3]int64{{12, 18, 6}, {7, 13, 1}, {0, 5, 5}, {5, 0, 5}, {100, int64(time.Minute), 100}, {2503, 3_600_000_000_000, 1}} {
		if got := GCD(tc[0], tc[1]); got != tc[2] {
			t.Fatalf("GCD(%d, %d) = %d, want %d", tc[0], tc[1], got, tc[2])
		}
	}
}

// TestSpecsDescribeNew checks each algorithm's Spec against what New really accepts: every
// described algorithm is built, and an optional field is accepted exactly when the Spec lists
// it (a rejected one is named in the *ConfigError). The config parser, the Redis codec and the
// schema test rely on the Specs, so a Spec that drifted from New would mislead all three.
func TestSpecsDescribeNew(t *testing.T) {
	set := map[string]func(*Config){
		FieldBurst:    func(c *Config) { c.Burst = 5 },
		FieldVariant:  func(c *Config) { c.Variant = VariantLog },
		FieldMaxDelay: func(c *Config) { c.MaxDelay = time.Second },
		FieldAdaptive: func(c *Config) { c.MaxLimit = 20 },
	}
	rejectedAs := map[string]string{FieldAdaptive: "max_limit"}
	// The documented contract (README, "Rules"): a change here is a change for users.
	want := map[string]string{
		AlgTokenBucket: "burst global", AlgLeakyBucket: "burst max_delay global",
		AlgSlidingWindow: "variant global", AlgFixedWindow: "global", AlgGCRA: "burst global",
		AlgAdaptive: "adaptive",
	}
	specs := Specs()
	if len(specs) != len(want) {
		t.Fatalf("%d algorithms described, want %d", len(specs), len(want))
	}
	for _, s := range specs {
		got := strings.Join(s.Fields, " ")
		if s.Global {
			got = strings.TrimSpace(got + " global")
		}
		if got != want[s.Name] {
			t.Fatalf("%s: accepts %q, want %q", s.Name, got, want[s.Name])
		}
	}
	for _, s := range specs {
		base := Config{Algorithm: s.Name, Limit: 10, Window: time.Second}
		if s.Name == AlgAdaptive {
			base.MinLimit, base.ErrorThreshold = 1, 0.5
		}
		if _, err := New(base); err != nil {
			t.Fatalf("%s: New refuses the plain configuration: %v", s.Name, err)
		}
		if got, ok := SpecOf(s.Name); !ok || got.Name != s.Name {
			t.Fatalf("SpecOf(%q) = %+v, %v", s.Name, got, ok)
		}
		for field, f := range set {
			c := base
			f(&c)
			_, err := New(c)
			if accepted := err == nil; accepted != s.Accepts(field) {
				t.Fatalf("%s with %s: New error %v, but Spec.Accepts says %v", s.Name, field, err, s.Accepts(field))
			}
			var ce *ConfigError
			if err != nil && (!errors.As(err, &ce) || ce.Field != cmp.Or(rejectedAs[field], field)) {
				t.Fatalf("%s with %s: the error %v does not name the field", s.Name, field, err)
			}
		}
	}
	if _, ok := SpecOf("token_bucket2"); ok {
		t.Fatal("SpecOf describes an unknown algorithm")
	}
	if _, err := New(Config{Algorithm: "token_bucket2", Limit: 1, Window: time.Second}); err == nil || !strings.Contains(err.Error(), algorithmList()) {
		t.Fatalf("an unknown algorithm: %v, want the list %s", err, algorithmList())
	}
}
