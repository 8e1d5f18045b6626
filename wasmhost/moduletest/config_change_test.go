package moduletest

import (
	"fmt"
	"testing"

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
// (GCRA) unless algo says otherwise.
type changeConfig struct {
	domain, keyPrefix, name, scope, key, algo, extra string
	partitions                                       int
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
	return fmt.Sprintf(`{"domain":%q,"redis":{"cluster":"webdis","key_prefix":%q,"partitions":%d,"failure_mode":"deny","timeout":"2s"},
		"rules":[{"name":%q,"scope":%q,"key":[%s],%s%s}]}`,
		c.domain, c.keyPrefix, c.partitions, c.name, c.scope, c.key, c.algo, c.extra)
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
			// header's value does.
			headers := [][2]string{hdr("x-k", "client"), hdr("x-j", "client-j")}
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
