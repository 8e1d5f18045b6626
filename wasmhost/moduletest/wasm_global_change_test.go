package moduletest

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestGlobalWasmConfigChange holds the promise that a configuration change never grants
// allowance on a global rule, through the compiled module: a key is used under one
// configuration by one proxy, then the plugin is reconfigured (a new host whose worker VM
// loads the changed configuration, on the same Redis, as Envoy does on an xDS update), and the
// new configuration admits exactly what the conversion leaves (the table of "Configuration
// changes" in the README). Windows are an hour or more, so nothing refills
// noticeably while the test runs (one token of 11/h takes 327 s).
//
// The last row is the amendment for idle keys: a key the old configuration finds back at its
// full allowance converts to the whole new capacity, so a request costing more than the old
// capacity (3 against 1) passes; converting to R_old would deny it for as long as every
// request costs that much.
func TestGlobalWasmConfigChange(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	for _, tc := range []struct {
		name          string
		before, after string // the rule's algorithm fields
		used          int    // requests admitted before the change; -1: until denied
		idle          time.Duration
		cost          string // the x-cost header after the change ("": 1)
		next          int    // admitted after the change
		recorded      string // the parameters the key records at the end
	}{
		{name: "token_bucket 11/h used 10 -> 10/h",
			before: `"algorithm":"token_bucket","limit":11,"window":"1h"`,
			after:  `"algorithm":"token_bucket","limit":10,"window":"1h"`,
			used:   10, next: 1, recorded: "1:10:3600000000000:10"},
		{name: "token_bucket 10/h used 5 -> 10/30m",
			before: `"algorithm":"token_bucket","limit":10,"window":"1h"`,
			after:  `"algorithm":"token_bucket","limit":10,"window":"30m"`,
			used:   5, next: 5, recorded: "1:10:1800000000000:10"},
		{name: "gcra 10/h all -> 10/2h",
			before: `"algorithm":"gcra","limit":10,"window":"1h"`,
			after:  `"algorithm":"gcra","limit":10,"window":"2h"`,
			used:   -1, next: 0, recorded: "6:10:3600000000000:10"},
		{name: "leaky_bucket 10/h all -> 10/2h",
			before: `"algorithm":"leaky_bucket","limit":10,"window":"1h"`,
			after:  `"algorithm":"leaky_bucket","limit":10,"window":"2h"`,
			used:   -1, next: 0, recorded: "2:10:3600000000000:10"},
		{name: "gcra 10/h all -> 5/2h",
			before: `"algorithm":"gcra","limit":10,"window":"1h"`,
			after:  `"algorithm":"gcra","limit":5,"window":"2h"`,
			used:   -1, next: 0, recorded: "6:10:3600000000000:10"},
		{name: "fixed_window 1/100ms idle -> 5/h at cost 3",
			before: `"algorithm":"fixed_window","limit":1,"window":"100ms"`,
			after:  `"algorithm":"fixed_window","limit":5,"window":"1h"`,
			used:   1, idle: 250 * time.Millisecond, cost: "3", next: 1, recorded: "5:5:3600000000000:5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "chg-" + strings.NewReplacer(" ", "-", "/", "-", ">", "", "_", "-").Replace(tc.name)
			// The cost header is read after the change only; its max is at most every row's new
			// capacity (a larger one is refused at configure time).
			cost := `,"cost":{"header":"x-cost","max":5}`
			before := newGlobalHost(t, globalConfig(redisOpts{}, "["+globalRule(name, tc.before, true)+"]"), srv.WebdisURL(), 1)
			user := hdr("x-user", "alice")
			max := tc.used
			if max < 0 {
				max = 100
			}
			used := 0
			for used < max {
				got, _ := doTimed(t, before, user)
				if got.Status != 0 {
					break
				}
				used++
			}
			if tc.used >= 0 {
				require.Equal(t, tc.used, used, "admitted before the change")
			} else {
				require.Less(t, used, max, "the old configuration must run out")
			}
			requireNoRedisFailures(t, before)
			time.Sleep(tc.idle)

			// The plugin is reconfigured: a new worker VM with the changed rule, the same Redis.
			after := newGlobalHost(t, globalConfig(redisOpts{}, "["+globalRule(name, tc.after+cost, true)+"]"), srv.WebdisURL(), 1)
			headers := [][2]string{user}
			if tc.cost != "" {
				headers = append(headers, hdr("x-cost", tc.cost))
			}
			next := 0
			for range tc.next + 5 {
				got, _ := doTimed(t, after, headers...)
				if got.Status != 0 {
					require.Equal(t, 429, got.Status, "%v", got)
					break
				}
				next++
			}
			require.Equal(t, tc.next, next, "admitted after the change")
			requireNoRedisFailures(t, after)
			requireCleanLogs(t, after)
			// An admission writes the key under the new parameters; a denial writes nothing, so
			// a key that admitted nothing still records the old ones.
			require.Equal(t, tc.recorded, srv.MustDo("HGET", expectedKey(name, "alice"), "cfg"))
		})
	}
}
