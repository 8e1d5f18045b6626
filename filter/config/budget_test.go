package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/stretchr/testify/require"
)

// quickly is the bound on the CPU time Parse may take on a config built to be expensive. The
// numbers measured are far lower (see the test logs), while the quadratic and unbounded costs
// these tests guard against took seconds to minutes.
const quickly = time.Second

// parseTimed parses data and returns the error and the CPU time Parse took.
func parseTimed(t *testing.T, data string) (error, time.Duration) {
	t.Helper()
	start := cpuTime(t)
	_, err := Parse([]byte(data))
	return err, cpuTime(t) - start
}

// manyRules builds a config of n rules, each written by rule(i).
func manyRules(n int, rule func(i int) string) string {
	var b strings.Builder
	b.WriteString(`{"rules":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(rule(i))
	}
	b.WriteString(`]}`)
	return b.String()
}

// bigKeysConfig is 256 rules of a million keys each, all applying to every request: the
// largest key tables a configuration can ask for.
func bigKeysConfig() string {
	return manyRules(MaxRules, func(i int) string {
		return fmt.Sprintf(`{"name":"r%d","continue":true,"max_keys":1000000,"key":[{"source":"header","name":"x-k"}],%s}`, i, tb)
	})
}

// bigRegexConfig is the second: 256 rules of 32 header regexes `[a-z]{1000}` each.
func bigRegexConfig(expr string) string {
	return manyRules(MaxRules, func(i int) string {
		var h []string
		for j := 0; j < MaxHeaderConds; j++ {
			h = append(h, fmt.Sprintf(`{"name":"x-h%d","regex":%q}`, j, expr))
		}
		return fmt.Sprintf(`{"name":"r%d","match":{"headers":[%s]},%s}`, i, strings.Join(h, ","), tb)
	})
}

// manyKeysObject is the third: one object with n members, distinct or all the same key.
func manyKeysObject(n int, same bool) string {
	var b strings.Builder
	b.WriteString(`{"rules":[{"name":"r",` + tb + `}]`)
	for i := 0; i < n; i++ {
		if same {
			b.WriteString(`,"domain":"d"`)
		} else {
			fmt.Fprintf(&b, `,"k%d":1`, i)
		}
	}
	b.WriteString(`}`)
	return b.String()
}

// The key tables of 256 rules of a million keys could hold gigabytes of shared data (the first
// request of such a config took 10.9 s and grew a VM to 4.5 GB): refused at once, with the
// total, the budget and the largest rules.
func TestBudgetRefusesHugeKeyTables(t *testing.T) {
	err, took := parseTimed(t, bigKeysConfig())
	t.Logf("256 rules x max_keys 1e6: refused in %v", took)
	require.Less(t, took, quickly)
	require.Error(t, err)
	msg := err.Error()
	// Every rule costs the same per key: its prefix "rl|rNNN|" is as long as any other's
	// from r100 on, and rules[100..] cost most.
	per := sharedstate.SharedBytesPerKey(len("rl|r100|"), tokenBucketStateSize(t))
	entries := 1000000 + sharedstate.OverflowSlots + 3
	require.Contains(t, msg, fmt.Sprintf("rules: the rules' key tables could hold %s in Envoy's shared data, above the budget of 512.0 MiB; largest: rules[100] %d keys x %d B = %s",
		formatBytes(totalShared(t, bigKeysConfig())), entries, per, formatBytes(int64(entries*per))))
	require.Contains(t, msg, "lower max_keys")
	// A worker VM's share does not grow with max_keys: a table keeps a fixed name cache.
	require.NotContains(t, msg, "in every worker VM")

	// Each rule alone is fine: the budget is about the sum.
	one := manyRules(1, func(i int) string {
		return `{"name":"r0","max_keys":1000000,"key":[{"source":"header","name":"x-k"}],` + tb + `}`
	})
	mustParse(t, one)
}

// tokenBucketStateSize is the state size of the token buckets the budget tests configure.
func tokenBucketStateSize(t *testing.T) int {
	lim, err := algorithms.New(algorithms.Config{Algorithm: algorithms.AlgTokenBucket, Limit: 1, Window: time.Second})
	require.NoError(t, err)
	return lim.StateSize()
}

// totalShared sums the shared-data cost of every rule of doc as the budget does, computed from
// the rules' names and sizes independently of tableCost.
func totalShared(t *testing.T, doc string) int64 {
	var root struct {
		Domain string
		Rules  []struct {
			Name    string
			MaxKeys int64 `json:"max_keys"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(doc), &root))
	if root.Domain == "" {
		root.Domain = "rl"
	}
	var total int64
	for _, r := range root.Rules {
		total += (r.MaxKeys + sharedstate.OverflowSlots + 3) *
			int64(sharedstate.SharedBytesPerKey(len(root.Domain)+len(r.Name)+2, tokenBucketStateSize(t)))
	}
	return total
}

// The budget follows the state size: a sliding log keeps a timestamp per admitted request, so
// far fewer of its keys fit in shared data than of a token bucket's.
func TestBudgetCountsStateSize(t *testing.T) {
	log := func(n, keys int) string {
		return manyRules(n, func(i int) string {
			return fmt.Sprintf(`{"name":"r%d","continue":true,"max_keys":%d,"key":[{"source":"client_ip"}],"algorithm":"sliding_window","variant":"log","limit":1024,"window":"1m"}`, i, keys)
		})
	}
	c := mustParse(t, log(1, 40000))
	tc := c.TableCost(c.Rules[0])
	entries := int64(40000 + sharedstate.OverflowSlots + 3)
	require.Equal(t, entries, tc.Slots)
	// "rl|r0|", the slot's geometry and number, its value (digest, kind, forward), a log of
	// 1024 events, the map entry.
	state := c.Rules[0].Limiter.StateSize()
	per := int64(sharedstate.SharedBytesPerKey(len("rl|r0|"), state))
	require.Greater(t, per, int64(state+16))
	require.Equal(t, entries*per, tc.SharedBytes)
	require.Equal(t, int64(sharedstate.TableVMBytes), tc.VMBytes)
	_, err := Parse([]byte(log(2, 40000)))
	require.ErrorContains(t, err, fmt.Sprintf("rules: the rules' key tables could hold %s in Envoy's shared data, above the budget of 512.0 MiB; largest: rules[0] %d keys x %d B = %s, rules[1] %[2]d keys x %[3]d B = %[4]s",
		formatBytes(2*entries*per), entries, per, formatBytes(entries*per)))

	// A rule without key parts has one key whatever max_keys says.
	c = mustParse(t, manyRules(MaxRules, func(i int) string {
		return fmt.Sprintf(`{"name":"r%d","continue":true,"max_keys":1000000,%s}`, i, tb)
	}))
	require.Equal(t, int64(1+sharedstate.OverflowSlots+3), c.TableCost(c.Rules[0]).Slots)
}

// The figures the budget uses for a table are sharedstate's: the per-key bytes of a slot for
// the filter's prefix "<domain>|<rule>|", and a fixed per-VM size.
func TestTableCostCoversTable(t *testing.T) {
	lim, err := algorithms.New(algorithms.Config{Algorithm: algorithms.AlgTokenBucket, Limit: 1, Window: time.Second})
	require.NoError(t, err)
	r := &Rule{Name: "api", MaxKeys: 1000, Key: []KeyPart{{Source: SourceClientIP}}, Limiter: lim}
	tc := (&Config{Domain: "demo"}).TableCost(r)
	require.Equal(t, int64(sharedstate.TableVMBytes), tc.VMBytes)
	require.Equal(t, int64((1000+sharedstate.OverflowSlots+3)*sharedstate.SharedBytesPerKey(len("demo|api|"), lim.StateSize())), tc.SharedBytes)
	// A slot's value holds at least the digest and the state.
	require.Greater(t, sharedstate.SharedBytesPerKey(0, lim.StateSize()), sharedstate.DigestSize+lim.StateSize())
}

// One expression `[a-z]{1000}` compiles to 1,004 instructions; 8,192 of them took 29.5 s and
// 3 GB to configure in a VM. The first is refused before anything is compiled.
func TestRegexProgramCap(t *testing.T) {
	err, took := parseTimed(t, bigRegexConfig(`[a-z]{1000}`))
	t.Logf("256 rules x 32 regexes [a-z]{1000}: refused in %v", took)
	require.Less(t, took, quickly)
	var es Errors
	require.True(t, errors.As(err, &es))
	require.Equal(t, "rules[0].match.headers[0].regex: compiles to 1004 RE2 instructions; the maximum is 1000 (a counted repetition such as {100} repeats its operand's program that many times)", es[0].Error())

	// Below the cap one expression is accepted, and the same for a path regex.
	mustParse(t, `{"rules":[{"name":"r","match":{"path":{"regex":"/[a-z]{995}"}},`+tb+`}]}`)
	_, err = Parse([]byte(`{"rules":[{"name":"r","match":{"path":{"regex":"/[a-z]{996}"}},` + tb + `}]}`))
	require.EqualError(t, err, "rules[0].match.path.regex: compiles to 1001 RE2 instructions; the maximum is 1000 (a counted repetition such as {100} repeats its operand's program that many times)")

	// Many expressions each under the cap meet the total, reported once where it is crossed.
	err, took = parseTimed(t, bigRegexConfig(`[a-z]{500}`))
	t.Logf("256 rules x 32 regexes [a-z]{500}: refused in %v", took)
	require.Less(t, took, quickly)
	require.True(t, errors.As(err, &es))
	require.Len(t, es, 1)
	require.Equal(t, "rules[1].match.headers[7].regex: the config's regular expressions compile to 20160 RE2 instructions so far; the maximum for all of them together is 20000", es[0].Error())

	// A syntax error still quotes the source as written.
	_, err = Parse([]byte(`{"rules":[{"name":"r","match":{"path":{"regex":"[a-"}},` + tb + `}]}`))
	require.EqualError(t, err, "rules[0].match.path.regex: error parsing regexp: missing closing ]: `[a-`")
}

// Duplicate keys are found in linear time: 80,000 keys in one object took 8.3 s before. Only
// the first 100 problems are reported, so the rest cost no edit distances either.
func TestManyKeysLinear(t *testing.T) {
	for _, same := range []bool{false, true} {
		data := manyKeysObject(80000, same)
		require.Less(t, len(data), MaxConfigBytes)
		err, took := parseTimed(t, data)
		t.Logf("80,000 keys (all the same: %v): refused in %v", same, took)
		require.Less(t, took, quickly)
		var es Errors
		require.True(t, errors.As(err, &es))
		require.Len(t, es, maxErrors+1)
		if same {
			require.Equal(t, "domain: duplicate key", es[0].Error())
		} else {
			require.Equal(t, "k0: unknown field", es[0].Error())
		}
		require.Equal(t, fmt.Sprintf("... and %d more problems", 80000-maxErrors-boolInt(same)), es[maxErrors].Error())
	}
	// Past the point where an object indexes its keys, the first occurrence still wins and
	// the duplicate's path is reported.
	var b strings.Builder
	b.WriteString(`{"rules":[{"name":"r",` + tb + `,"deny":{"headers":{`)
	for i := 0; i < 2*indexAfter; i++ {
		fmt.Fprintf(&b, `"x-h%d":"v",`, i)
	}
	b.WriteString(`"x-h3":"again","x-h30":"again"}}}]}`)
	_, err := Parse([]byte(b.String()))
	require.EqualError(t, err, "rules[0].deny.headers.x-h3: duplicate key\nrules[0].deny.headers.x-h30: duplicate key")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A value under a very long key must not carry that key into the path of every element below
// it: paths are built only for problems, and long keys are shortened in them.
func TestLongKeyPaths(t *testing.T) {
	long := strings.Repeat("k", 500_000)
	data := `{"` + long + `":[` + strings.Repeat("0,", 200_000) + `0],"rules":[{"name":"r",` + tb + `}]}`
	require.Less(t, len(data), MaxConfigBytes)
	err, took := parseTimed(t, data)
	t.Logf("200,000 elements under a 500 kB key: refused in %v", took)
	require.Less(t, took, quickly)
	require.EqualError(t, err, `["`+strings.Repeat("k", 64)+`"...]: unknown field`)
}
