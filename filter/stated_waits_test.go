package filter

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/stretchr/testify/require"
)

// The waits the headers state are ones a client can rely on, for every algorithm and for
// limits and windows that do not divide a second: a client denied with Retry-After: n that
// comes back n seconds later is admitted, and one told t=n by RateLimit that sends nothing
// for n seconds finds the whole quota again (its next request leaves r = limit - 1). A wait
// rounded down, or a t that stops short of a whole quota, fails here.
func TestStatedWaitsAreHonouredNative(t *testing.T) {
	algos := []string{`"algorithm":"token_bucket"`, `"algorithm":"gcra"`, `"algorithm":"leaky_bucket"`,
		`"algorithm":"fixed_window"`, `"algorithm":"sliding_window","variant":"log"`,
		`"algorithm":"sliding_window","variant":"counter"`}
	item := regexp.MustCompile(`^"k";r=(\d+);t=(\d+)$`)
	for _, algo := range algos {
		for _, lw := range []struct {
			limit  int64
			window string
		}{{1, "7ms"}, {3, "1300ms"}, {7, "90m"}, {2, "1s"}} {
			name := algo + " " + strconv.FormatInt(lw.limit, 10) + " per " + lw.window
			t.Run(name, func(t *testing.T) {
				d := newNative(t, `{"rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],`+algo+
					`,"limit":`+strconv.FormatInt(lw.limit, 10)+`,"window":"`+lw.window+`"}]}`)
				// Start off any boundary, so that fixed and sliding windows are caught mid-window.
				now := filtertest.T0.Add(3*time.Millisecond + 137*time.Microsecond)
				var last filtertest.Outcome
				for i := 0; ; i++ {
					require.Less(t, i, 100, "never denied")
					o := d.Do(t, now, filtertest.XK("a"))
					if o.Status != 0 {
						break
					}
					last = o
				}
				// Denied: come back after exactly Retry-After seconds.
				o := d.Do(t, now, filtertest.XK("a"))
				require.Equal(t, 429, o.Status)
				ra, err := strconv.ParseInt(o.Headers["retry-after"], 10, 64)
				require.NoError(t, err, "Retry-After %q", o.Headers["retry-after"])
				require.Zero(t, d.Do(t, now.Add(time.Duration(ra)*time.Second), filtertest.XK("a")).Status,
					"denied after waiting Retry-After: %d s", ra)

				// The last admitted request's t: on a fresh key (x-k: b), after t seconds of silence, the
				// quota is whole again.
				m := item.FindStringSubmatch(last.Headers["ratelimit"])
				require.NotNil(t, m, "RateLimit %q", last.Headers["ratelimit"])
				tt, _ := strconv.ParseInt(m[2], 10, 64)
				for range lw.limit {
					require.Zero(t, d.Do(t, now, filtertest.XK("b")).Status)
				}
				o = d.Do(t, now.Add(time.Duration(tt)*time.Second), filtertest.XK("b"))
				require.Zero(t, o.Status, "denied %d s after the t of the last admitted request", tt)
				require.Equal(t, `"k";r=`+strconv.FormatInt(lw.limit-1, 10)+`;t=`, o.Headers["ratelimit"][:len(`"k";r=`)+len(strconv.FormatInt(lw.limit-1, 10))+3],
					"the quota is whole again %d s later", tt)
			})
		}
	}
}
