package filter

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/memstore"
	"github.com/stretchr/testify/require"
)

// A configuration change never hands a client allowance it did not have: each row of
// filtertest.ConfigChangeRows exhausts (or uses) a key under one rule, then asks under the
// changed rule on the same store. wasmhost/moduletest runs the same rows against
// the compiled module on one shared data.
func TestConfigChangeNeverGrantsAllowance(t *testing.T) {
	for _, row := range filtertest.ConfigChangeRows {
		t.Run(row.Name, func(t *testing.T) {
			store := memstore.New()
			d := newNativeWithStore(t, filtertest.ConfigChangeRule(row.Before), store)
			row.UseBefore(t, d)
			stop(d)
			d = newNativeWithStore(t, filtertest.ConfigChangeRule(row.After), store)
			defer stop(d)
			row.CheckAfter(t, d)
		})
	}
}

// After a configuration change, the headers of a key written under the old parameters are
// those of the new rule: RateLimit's r never exceeds the new capacity nor falls below 0, and
// its t, X-RateLimit-Reset and Retry-After never exceed the new rule's longest wait (two of its
// windows, for a rule whose burst is its limit), whether the change shrank the limit, shrank
// the window or grew it. A state misread under the new parameters (the defect the recorded
// parameter block fixed) shows here as an r above the new limit or a wait of the old rule.
func TestHeadersAfterConfigChangeStayInBoundsNative(t *testing.T) {
	type change struct {
		before, after string
		limit         int64         // the new rule's limit (its capacity: no burst)
		window        time.Duration // the new rule's window
	}
	changes := []change{
		{`"limit":10,"window":"1m"`, `"limit":2,"window":"1m"`, 2, time.Minute},
		{`"limit":10,"window":"1m"`, `"limit":10,"window":"1s"`, 10, time.Second},
		{`"limit":3,"window":"1s"`, `"limit":3,"window":"1h"`, 3, time.Hour},
		{`"limit":1,"window":"7ms"`, `"limit":4,"window":"90m"`, 4, 90 * time.Minute},
	}
	algos := []string{`"algorithm":"token_bucket"`, `"algorithm":"gcra"`, `"algorithm":"leaky_bucket"`,
		`"algorithm":"fixed_window"`, `"algorithm":"sliding_window","variant":"log"`,
		`"algorithm":"sliding_window","variant":"counter"`}
	item := regexp.MustCompile(`^"k";r=(-?\d+);t=(-?\d+)$`)
	for _, algo := range algos {
		for _, ch := range changes {
			for _, used := range []int{1, -1} {
				name := algo + " " + ch.before + " -> " + ch.after + " used " + strconv.Itoa(used)
				t.Run(name, func(t *testing.T) {
					cfg := func(fields string) string {
						return `{"rate_limit_headers":"both","rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],` +
							algo + "," + fields + `}]}`
					}
					store := memstore.New()
					d := newNativeWithStore(t, cfg(ch.before), store)
					row := filtertest.ConfigChangeRow{Used: used}
					row.UseBefore(t, d)
					stop(d)
					d = newNativeWithStore(t, cfg(ch.after), store)
					defer stop(d)
					bound := int64(2 * ch.window / time.Second)
					if (2*ch.window)%time.Second != 0 {
						bound++
					}
					for i, at := range []time.Duration{0, time.Millisecond, time.Second} {
						got := d.Do(t, filtertest.T0.Add(at), filtertest.XK("client"))
						m := item.FindStringSubmatch(got.Headers["ratelimit"])
						require.NotNilf(t, m, "request %d: RateLimit %q", i, got.Headers["ratelimit"])
						r, _ := strconv.ParseInt(m[1], 10, 64)
						tt, _ := strconv.ParseInt(m[2], 10, 64)
						require.GreaterOrEqualf(t, r, int64(0), "request %d: r", i)
						require.LessOrEqualf(t, r, ch.limit, "request %d: r above the new limit", i)
						require.LessOrEqualf(t, tt, bound, "request %d: t above the new rule's longest wait", i)
						reset, _ := strconv.ParseInt(got.Headers["x-ratelimit-reset"], 10, 64)
						require.LessOrEqualf(t, reset, bound, "request %d: X-RateLimit-Reset", i)
						require.Equalf(t, strconv.FormatInt(ch.limit, 10), got.Headers["x-ratelimit-limit"], "request %d", i)
						if got.Status != 0 {
							ra, err := strconv.ParseInt(got.Headers["retry-after"], 10, 64)
							require.NoErrorf(t, err, "request %d: Retry-After %q", i, got.Headers["retry-after"])
							require.Truef(t, ra >= 1 && ra <= bound, "request %d: Retry-After %d outside [1, %d]", i, ra, bound)
						}
					}
				})
			}
		}
	}
}

// An override changes the parameters a key is decided under, not where its state is: adding,
// re-spelling, narrowing or removing an override grants a key that has used its allowance
// nothing (filtertest.OverrideChangeConfigs, at one instant), for local rules on one shared
// store and for global rules on one Redis. wasmhost/moduletest runs the same
// configurations against the compiled module.
func TestOverrideChangeNeverGrantsAllowance(t *testing.T) {
	for _, algo := range filtertest.OverrideChangeAlgorithms {
		t.Run("local "+algo, func(t *testing.T) {
			store := memstore.New()
			filtertest.CheckOverrideChanges(t, filtertest.OverrideChangeConfigs("local", algo), func(t *testing.T, rules string) func() bool {
				d := newNativeWithStore(t, `{"rules":`+rules+`}`, store)
				return func() bool {
					return d.Do(t, filtertest.T0, filtertest.Step{Headers: [][2]string{hdr("x-k", "free-alice")}}).Status == 0
				}
			})
		})
	}
	srv := redistest.Start(t)
	for _, algo := range filtertest.OverrideChangeAlgorithms {
		t.Run("global "+algo, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			filtertest.CheckOverrideChanges(t, filtertest.OverrideChangeConfigs("global", algo), func(t *testing.T, rules string) func() bool {
				l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, rules), 1, 1)
				return func() bool {
					ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "free-alice"))
					return ok
				}
			})
		})
	}
}
