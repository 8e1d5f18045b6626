package moduletest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/confchange"
	"github.com/stretchr/testify/require"
)

// A configuration change never hands a client allowance it did not have, against the compiled
// module: the old and the new configuration run in two hosts on one shared data, as Envoy runs
// old and new VMs during an update (the rows are filtertest.ConfigChangeRows, which package
// filter runs natively).
func TestConfigChangeNeverGrantsAllowance(t *testing.T) {
	t.Parallel()
	for _, row := range filtertest.ConfigChangeRows {
		t.Run(row.Name, func(t *testing.T) {
			shared := wasmhost.NewSharedData()
			row.UseBefore(t, newWasm(t, filtertest.ConfigChangeRule(row.Before), wasmOptions{shared: shared}))
			row.CheckAfter(t, newWasm(t, filtertest.ConfigChangeRule(row.After), wasmOptions{shared: shared}))
		})
	}
}

// changeConfig is one side of a configuration change: a one-rule configuration, 3 an hour
// (GCRA) unless algo says otherwise; options are top-level fields (",\"trusted_hops\":1").
type changeConfig struct {
	domain, keyPrefix, name, scope, key, algo, extra, options string
	partitions                                                int
}

func (c changeConfig) json() string {
	def := changeConfig{domain: "d", keyPrefix: "rl", name: "k", scope: "local",
		key: `{"source":"header","name":"x-k"}`, algo: `"algorithm":"gcra","limit":3,"window":"1h"`, partitions: 1}
	for _, f := range []struct{ v, d *string }{{&c.domain, &def.domain}, {&c.keyPrefix, &def.keyPrefix}, {&c.name, &def.name},
		{&c.scope, &def.scope}, {&c.key, &def.key}, {&c.algo, &def.algo}} {
		if *f.v == "" {
			*f.v = *f.d
		}
	}
	if c.partitions == 0 {
		c.partitions = 1
	}
	return fmt.Sprintf(`{"domain":%q%s,"redis":{"cluster":"webdis","key_prefix":%q,"partitions":%d,"failure_mode":"deny","timeout":"2s"},
		"rules":[{"name":%q,"scope":%q,"key":[%s],%s%s}]}`,
		c.domain, c.options, c.keyPrefix, c.partitions, c.name, c.scope, c.key, c.algo, c.extra)
}

// TestCheckPreviousMatchesTheModule: for each kind of change that docs/config-changes.md
// lists, check -previous (its comparison, confchange.Compare) says what the compiled module
// does. A client uses up its allowance under the old configuration (one proxy's shared data,
// one Redis); under the new one, on the same state, its next request is admitted exactly when
// check said "reset", and denied when it said "kept" or "converted without grant".
func TestCheckPreviousMatchesTheModule(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	g := changeConfig{scope: "global"}
	rows := []struct {
		name     string
		old, new changeConfig
		want     confchange.ChangeKind
	}{
		{"nothing stored changes (max_keys, cost, description)", changeConfig{}, changeConfig{extra: `,"max_keys":50,"cost":1,"description":"x"`}, confchange.ChangeKept},
		{"burst 0 is the limit", changeConfig{}, changeConfig{algo: `"algorithm":"gcra","limit":3,"window":"1h","burst":3`}, confchange.ChangeKept},
		{"limit raised", changeConfig{}, changeConfig{algo: `"algorithm":"gcra","limit":30,"window":"1h"`}, confchange.ChangeConverted},
		{"algorithm", changeConfig{}, changeConfig{algo: `"algorithm":"token_bucket","limit":3,"window":"1h"`}, confchange.ChangeConverted},
		{"global window", g, changeConfig{scope: "global", algo: `"algorithm":"gcra","limit":3,"window":"2h"`}, confchange.ChangeConverted},
		{"renamed", changeConfig{}, changeConfig{name: "k2"}, confchange.ChangeReset},
		{"scope local -> global", changeConfig{}, g, confchange.ChangeReset},
		{"scope global -> local", g, changeConfig{}, confchange.ChangeReset},
		{"key part", changeConfig{}, changeConfig{key: `{"source":"header","name":"x-j"}`}, confchange.ChangeReset},
		{"key part prefix", changeConfig{key: `{"source":"client_ip"}`}, changeConfig{key: `{"source":"client_ip","ipv4_prefix":24}`}, confchange.ChangeReset},
		{"trusted_hops, client_ip key", changeConfig{key: `{"source":"client_ip"}`}, changeConfig{key: `{"source":"client_ip"}`, options: `,"trusted_hops":1`}, confchange.ChangeReset},
		{"trusted_hops, header key", changeConfig{}, changeConfig{options: `,"trusted_hops":1`}, confchange.ChangeKept},
		{"domain", changeConfig{}, changeConfig{domain: "e"}, confchange.ChangeReset},
		{"global key_prefix", g, changeConfig{scope: "global", keyPrefix: "rl2"}, confchange.ChangeReset},
		{"global partitions", g, changeConfig{scope: "global", partitions: 4}, confchange.ChangeReset},
		{"local rule, redis key_prefix", changeConfig{}, changeConfig{keyPrefix: "rl2"}, confchange.ChangeKept},
		{"override added", changeConfig{}, changeConfig{extra: `,"overrides":[{"exact":"client","limit":30}]`}, confchange.ChangeConverted},
		{"global override added", g, changeConfig{scope: "global", extra: `,"overrides":[{"exact":"client","limit":30}]`}, confchange.ChangeConverted},
		{"override re-spelt", changeConfig{extra: `,"overrides":[{"prefix":"cl","limit":3}]`},
			changeConfig{extra: `,"overrides":[{"prefix":"client","limit":5}]`}, confchange.ChangeConverted},
		{"override removed", changeConfig{extra: `,"overrides":[{"exact":"client","limit":3,"window":"2h"}]`}, changeConfig{}, confchange.ChangeConverted},
		{"override limit", changeConfig{extra: `,"overrides":[{"exact":"client","limit":3}]`},
			changeConfig{extra: `,"overrides":[{"exact":"client","limit":30}]`}, confchange.ChangeConverted},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			oldCfg, err := config.Parse([]byte(row.old.json()))
			require.NoError(t, err)
			newCfg, err := config.Parse([]byte(row.new.json()))
			require.NoError(t, err)
			changes, warnings := confchange.Compare([]confchange.Plugin{{Config: oldCfg}}, []confchange.Plugin{{Config: newCfg}}, "the old configuration")
			var got *confchange.RuleChange
			for i := range changes {
				if changes[i].Kind != confchange.ChangeRemoved {
					got = &changes[i]
					break
				}
			}
			require.NotNil(t, got, "%v", changes)
			require.Equal(t, row.want, got.Kind, "%s", got)
			require.Equal(t, row.want == confchange.ChangeReset, len(warnings) > 0, "a warning on each reset: %q", warnings)

			shared := wasmhost.NewSharedData()
			host := func(cfg string) *wasmhost.Host {
				return newWasm(t, cfg, wasmOptions{workers: 1, shared: shared, realTime: true,
					clusters: map[string]string{"webdis": srv.WebdisURL()}}).host
			}
			// A key is its parts' values alone: x-j's value differs from x-k's, as another
			// header's value does. The client comes through a proxy: its address is the
			// last X-Forwarded-For entry, the proxy's the connection's.
			headers := [][2]string{hdr("x-k", "client"), hdr("x-j", "client-j"), hdr("x-forwarded-for", "203.0.113.7")}
			before := host(row.old.json())
			used := 0
			for ; used < 10; used++ {
				if o, _ := doTimed(t, before, headers...); o.Status != 0 {
					break
				}
			}
			require.Equal(t, 3, used, "the old configuration admits 3")
			o, _ := doTimed(t, host(row.new.json()), headers...)
			require.Equal(t, row.want == confchange.ChangeReset, o.Status == 0,
				"check said %q; the module answered %d to the client's next request", got, o.Status)
		})
	}
}

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

// An override changes the parameters a key is decided under, not where its state is: the
// configurations of filtertest.OverrideChangeConfigs, applied in turn to one shared data (local)
// or one Redis (global), admit free-alice 10 in all, as package filter checks natively. One
// worker each: the state is the store's, whichever worker reads it.
func TestOverrideChangeNeverGrantsAllowanceWasm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, algo := range filtertest.OverrideChangeAlgorithms {
		t.Run("local "+algo, func(t *testing.T) {
			shared := wasmhost.NewSharedData()
			filtertest.CheckOverrideChanges(t, filtertest.OverrideChangeConfigs("local", algo), func(t *testing.T, rules string) func() bool {
				d := newWasm(t, `{"rules":`+rules+`}`, wasmOptions{workers: 1, shared: shared})
				return func() bool {
					return d.Do(t, filtertest.T0, step{Headers: [][2]string{hdr("x-k", "free-alice")}}).Status == 0
				}
			})
		})
		t.Run("global "+algo, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			filtertest.CheckOverrideChanges(t, filtertest.OverrideChangeConfigs("global", algo), func(t *testing.T, rules string) func() bool {
				h := newGlobalHost(t, globalConfig(redisOpts{}, rules), srv.WebdisURL(), 1)
				return func() bool {
					o, _ := doTimed(t, h, hdr("x-k", "free-alice"))
					return o.Status == 0
				}
			})
		})
	}
}
