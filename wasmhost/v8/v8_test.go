package v8

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// run runs job, skipping the test when Node is not installed (a failure under CI=true, where
// .ci/run installs it).
func run(t testing.TB, job Job) Result {
	t.Helper()
	res, err := Run(job)
	if errors.Is(err, ErrNoNode) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	require.NoError(t, err)
	return res
}

// module returns the path of the compiled package pkg (relative to the repository root).
func module(t testing.TB, pkg string) string {
	t.Helper()
	p, err := wasmtest.BuildFile(pkg)
	require.NoError(t, err)
	return p
}

// The smoke test of the V8 tier: the compiled filter loads and configures on V8 with Envoy's
// flags, a limit denies with the configured response, and two worker VMs share one key
// through the host's shared data (each worker alone would admit 3 requests; together they
// admit 3), while another client keeps its own allowance. An invalid configuration is refused.
func TestV8Smoke(t *testing.T) {
	mod := module(t, ".")
	cfg := `{"deny":{"status":403,"body":"limited by %RULE%","content_type":"text/plain"},` +
		`"rules":[{"name":"per-ip","key":[{"source":"client_ip"}],` +
		`"algorithm":"fixed_window","limit":3,"window":"1h"}]}`
	a, b := "192.0.2.1:4000", "192.0.2.2:4000"
	reqs := []Request{
		{Worker: 0, Source: a}, {Worker: 1, Source: a}, {Worker: 0, Source: a},
		{Worker: 1, Source: a}, {Worker: 0, Source: a}, {Worker: 1, Source: b},
	}
	res := run(t, Job{Module: mod, Config: cfg, Workers: 2, Requests: reqs})
	require.True(t, res.Configured, "the configuration must be accepted: %v", res.Logs)
	var got []int
	for _, r := range res.Results {
		got = append(got, r.Status)
	}
	require.Equal(t, []int{200, 200, 200, 403, 403, 200}, got,
		"the two workers share client a's 3 requests; client b has its own")
	require.True(t, strings.HasPrefix(res.Results[0].Header("ratelimit"), `"per-ip";r=2;t=`), res.Results[0].Headers)
	denied := res.Results[3]
	require.NotEmpty(t, denied.Header("retry-after"))
	require.Equal(t, "limited by per-ip", denied.Body)
	require.Equal(t, "text/plain", denied.Header("content-type"))

	bad := run(t, Job{Module: mod, Config: `{"rules":[{"name":"x","algorithm":"token_bucket","limit":1,"window":"10"}]}`})
	require.False(t, bad.Configured, "a window without a unit must be refused")
}

// BenchmarkV8GuestPerRequest reports the guest time per request on V8 (guest-ns/op: the
// median of 5 rounds' means of b.N requests after a warm-up; guest-p50-ns/op: the median
// request of all rounds, the statistic the wazero benchmark reports) for the cases of
// wasmtest.PerRequestCases, which wasmhost/moduletest's BenchmarkGuestPerRequest runs too: the
// pass-through module, the host-call floor (wasmhost/testdata/hostfloor: the 1-rule request's
// host calls and nothing else), the filter with 1 and 5 rules (on one key and on five), and
// with 1 rule for a new client on every request: on a table that never fills (max_keys twice
// the clients sent, so that, as on wazero, every new client finds a free slot and the run ends
// with the table half full) and on one of 1,000 keys, full after the warm-up (every new client
// takes an idle key's slot).
//
// A new-client case runs in one Node process with two baselines, as on wazero: the same client
// on every request (the host floor's or 1 rule's default request) and returning clients (a
// population as large as the warm-up, at most 9/10 of max_keys, each placed once in the
// warm-up, then coming back in a fixed shuffled order, on a table of the case's max_keys with
// a rule whose keys stay active between their client's requests). The VMs take turns by
// blocks of requests so that all meet the same load, and the case reports its median request
// over each baseline's (x-same-client, x-returning-clients): run apart, each round of either
// can be 1.7x slower than the next when other processes share the cores. Run with a fixed
// count, e.g. -benchtime 20000x: each run is one Node process.
func BenchmarkV8GuestPerRequest(b *testing.B) {
	const warmup, rounds = 2000, 5
	req := Request{Method: "GET", Path: "/api", Source: "192.0.2.1:5555", Headers: [][2]string{{"x-tenant", "acme"}}}
	for _, c := range wasmtest.PerRequestCases() {
		b.Run(c.Name, func(b *testing.B) {
			mod := module(b, c.Module)
			maxKeys := c.MaxKeys
			if maxKeys == 0 {
				maxKeys = min(2*(warmup+rounds*b.N), 1_000_000)
			}
			config := c.Config
			if strings.Contains(config, "%d") {
				config = fmt.Sprintf(config, maxKeys)
			}
			bench := &Bench{Request: req, Warmup: warmup, Rounds: rounds, N: b.N}
			if c.SameClient != "" {
				bench.NewClients, bench.SameClient = true, c.SameClient
				bench.Clients, bench.Population = fmt.Sprintf(c.Clients, maxKeys), min(warmup, maxKeys*9/10)
			}
			b.ResetTimer()
			res := run(b, Job{Module: mod, Config: config, Workers: 1, Bench: bench})
			require.True(b, res.Configured)
			require.Positive(b, res.GuestP50NS, "host.js reported no per-request median")
			b.ReportMetric(res.GuestNS, "guest-ns/op")
			b.ReportMetric(res.GuestP50NS, "guest-p50-ns/op")
			if c.SameClient != "" {
				require.Positive(b, res.SameClientP50NS, "host.js reported no same client's median")
				require.Positive(b, res.ReturningClientsP50NS, "host.js reported no returning clients' median")
				b.ReportMetric(res.SameClientP50NS, "same-client-p50-ns/op")
				b.ReportMetric(res.ReturningClientsP50NS, "returning-clients-p50-ns/op")
				b.ReportMetric(res.GuestP50NS/res.SameClientP50NS, "x-same-client")
				b.ReportMetric(res.GuestP50NS/res.ReturningClientsP50NS, "x-returning-clients")
			}
		})
	}
}

// BenchmarkV8GuestPerRequestKeyLength is wasmhost/moduletest's BenchmarkGuestPerRequestKeyLength
// on V8: one rule and five keyed on a header of 16 bytes, then of 60 KiB, refused with 431
// (longer than the default max_key_bytes), then decided ("60KiB-decided", max_key_bytes 65536).
// The long key's cases report their median request's guest time over the short key's, in the
// same run (x-16B). Run with a fixed count, e.g. -benchtime 5000x: each case is one Node
// process.
func BenchmarkV8GuestPerRequestKeyLength(b *testing.B) {
	rule := func(i int) string {
		return fmt.Sprintf(`{"name":"r%d","continue":true,"key":[{"source":"const","value":"%d"},{"source":"header","name":"x-key"}],`+
			`"algorithm":"token_bucket","limit":1000000000,"window":"1s"}`, i, i)
	}
	five := make([]string, 5)
	for i := range five {
		five[i] = rule(i)
	}
	mod := module(b, ".")
	for _, rules := range []struct {
		name, rules string
	}{{"1rule", rule(0)}, {"5rules", strings.Join(five, ",")}} {
		var short float64
		for _, length := range []struct {
			name, options string
			bytes         int
		}{{"16B", "", 16}, {"60KiB", "", 60 << 10}, {"60KiB-decided", `"max_key_bytes":65536,`, 60 << 10}} {
			b.Run(rules.name+"/"+length.name, func(b *testing.B) {
				req := Request{Method: "GET", Path: "/api", Source: "192.0.2.1:5555",
					Headers: [][2]string{{"x-key", strings.Repeat("k", length.bytes)}}}
				res := run(b, Job{Module: mod, Config: `{` + length.options + `"rules":[` + rules.rules + `]}`, Workers: 1,
					Bench: &Bench{Request: req, Warmup: 500, Rounds: 5, N: b.N}})
				require.True(b, res.Configured)
				require.Positive(b, res.GuestP50NS, "host.js reported no per-request median")
				b.ReportMetric(res.GuestNS, "guest-ns/op")
				b.ReportMetric(res.GuestP50NS, "guest-p50-ns/op")
				if length.bytes == 16 {
					short = res.GuestP50NS
				} else if short > 0 {
					b.ReportMetric(res.GuestP50NS/short, "x-16B")
				}
			})
		}
	}
}

// BenchmarkV8Start reports, per fresh Node process, the first VM's start on V8: for an empty
// Go reactor instantiate + _initialize; for the filter instantiate + _initialize + root
// context + proxy_on_vm_start + proxy_on_configure (a 1-rule configuration), and the filter's
// first request after it. The first VM's steps are reported too (initialize-ms: _initialize;
// configure-ms: proxy_on_configure), each a mean over the processes, and the CPU time of the
// first VM and the first request (first-vm-cpu-ms, first-request-cpu-ms: the process's user
// and system time, which other load on the machine inflates far less). x-empty is a first VM's
// CPU time over the empty reactor's in the same run.
//
// The reactors of wasmhost/testdata/stdreactor link, each alone and then all together, the
// packages the filter imports from outside the repository, used as the filter uses them: their
// _initialize beside the empty reactor's is what those packages' initialisers cost, and the
// filter's beside "std-all" is the filter's own. Run with a small fixed count, e.g.
// -benchtime 5x.
func BenchmarkV8Start(b *testing.B) {
	var emptyCPU float64
	for _, pkg := range []string{"emptyreactor", "stdreactor/regexp", "stdreactor/netip", "stdreactor/time",
		"stdreactor/jsontext", "stdreactor/strconv", "stdreactor/siphash", "stdreactor/all"} {
		name := strings.Replace(strings.TrimPrefix(pkg, "emptyreactor"), "stdreactor/", "std-", 1)
		if name == "" {
			name = "empty-reactor"
		}
		mod := module(b, "./wasmhost/testdata/"+pkg)
		b.Run(name, func(b *testing.B) {
			var sum, cpu, init float64
			for b.Loop() {
				res := run(b, Job{Module: mod, Mode: "init"})
				sum += res.FirstVMMS
				cpu += res.FirstVMCPUMS
				init += res.PhasesMS["initialize"]
			}
			n := float64(b.N)
			if pkg == "emptyreactor" {
				emptyCPU = cpu / n
			}
			b.ReportMetric(sum/n, "first-vm-ms")
			b.ReportMetric(cpu/n, "first-vm-cpu-ms")
			b.ReportMetric(init/n, "initialize-ms")
			b.ReportMetric(cpu/n/emptyCPU, "x-empty")
		})
	}
	filter := module(b, ".")
	req := Request{Method: "GET", Path: "/api", Source: "192.0.2.1:5555", Headers: [][2]string{{"x-tenant", "acme"}}}
	b.Run("filter", func(b *testing.B) {
		var vm, first, vmCPU, firstCPU, init, configure float64
		for b.Loop() {
			res := run(b, Job{Module: filter, Config: `{"rules":[` + wasmtest.BenchRule(0, "") + `]}`, Workers: 1, Requests: []Request{req}})
			require.True(b, res.Configured)
			vm += res.FirstVMMS
			first += res.FirstRequestMS
			vmCPU += res.FirstVMCPUMS
			firstCPU += res.FirstRequestCPUMS
			init += res.PhasesMS["initialize"]
			configure += res.PhasesMS["configure"]
		}
		n := float64(b.N)
		b.ReportMetric(vm/n, "first-vm-ms")
		b.ReportMetric(first/n, "first-request-ms")
		b.ReportMetric(vmCPU/n, "first-vm-cpu-ms")
		b.ReportMetric(firstCPU/n, "first-request-cpu-ms")
		b.ReportMetric(init/n, "initialize-ms")
		b.ReportMetric(configure/n, "configure-ms")
		b.ReportMetric(vmCPU/n/emptyCPU, "x-empty")
	})
}

var firstRequestsRun struct {
	once     sync.Once
	res      Result
	compiled []Compiled
	names    map[uint32]string
	err      error
}

// firstRequests runs the filter with one rule (wasmtest.BenchRule) on a fresh V8 once for the tests of
// the first requests, and returns its result, what V8 compiled (with phase markers) and the
// module's function names. Two requests with different keys are sent, so each phase of a
// VM's start and of its first two requests can be told apart.
func firstRequests(t *testing.T) (Result, []Compiled, map[uint32]string) {
	t.Helper()
	r := &firstRequestsRun
	mod := module(t, ".")
	r.once.Do(func() {
		wasm, err := os.ReadFile(mod)
		if err != nil {
			r.err = err
			return
		}
		if r.names, r.err = wasmtest.FunctionNames(wasm); r.err != nil {
			return
		}
		reqs := []Request{
			{Method: "GET", Path: "/api", Source: "192.0.2.1:5555", Headers: [][2]string{{"x-tenant", "acme"}}},
			{Method: "GET", Path: "/api", Source: "192.0.2.2:5555", Headers: [][2]string{{"x-tenant", "acme"}}},
		}
		r.res, r.compiled, r.err = CompiledFunctions(Job{Module: mod, Config: `{"rules":[` + wasmtest.BenchRule(0, "") + `]}`, Workers: 1, Requests: reqs, PhaseMarkers: true})
	})
	if errors.Is(r.err, ErrNoNode) && os.Getenv("CI") != "true" {
		t.Skip(r.err)
	}
	require.NoError(t, r.err)
	require.True(t, r.res.Configured, "%v", r.res.Logs)
	require.Len(t, r.res.Results, 2)
	return r.res, r.compiled, r.names
}

// A fresh VM's first request is latency a client sees, while a VM starts before it serves
// traffic: the filter allocates at configure what its first requests need (each table's slot
// name cache), so that the Go heap's first growth, and the page allocator's slow path that V8
// compiles for it, happen in proxy_on_configure and not in the first request
// (docs/BENCHMARKS.md).
func TestV8FirstRequestGrowsNoMemory(t *testing.T) {
	res, _, _ := firstRequests(t)
	require.Equal(t, 200, res.Results[0].Status)
	require.NotZero(t, res.MemoryBytes["configure"])
	require.Equal(t, res.MemoryBytes["configure"], res.MemoryBytes["request"],
		"the first request grew the VM's memory: the heap's first growth moved out of configure")
}

// What a valid configure and the first request run is what V8 compiles before the first
// response (see filter/doc.go): for a one-rule configuration with no top-level options,
// overrides, lease, shaping, adaptive or global rule, none of the code kept out of line for
// those is compiled, nor the runtime's itab construction (an interface to interface
// conversion), nor strings.Map and strings.ToLower (ASCII loops do their work).
func TestV8ValidConfigureCompilesNoColdCode(t *testing.T) {
	_, compiled, names := firstRequests(t)
	got := map[string]bool{}
	for _, c := range compiled {
		if c.Phase != "request1" { // what the second request compiles is not the first's
			got[names[c.Index]] = true
		}
	}
	linked := map[string]bool{}
	for _, name := range names {
		linked[name] = true
	}
	// The trace is read: functions every configure and request run are in it.
	for _, fn := range []string{
		"github.com/ratelimit-wasm/ratelimit/filter.(*plugin).configure",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).config",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).OnHttpRequestHeaders",
	} {
		require.True(t, got[wasmtest.LinkerName(fn)], "%s not compiled (%d functions traced)", fn, len(compiled))
	}
	for _, fn := range []string{
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).options",
		"github.com/ratelimit-wasm/ratelimit/filter.ruleError",
		"github.com/ratelimit-wasm/ratelimit/filter.(*ruleState).prepareOverrides",
		"github.com/ratelimit-wasm/ratelimit/filter.(*plugin).prepareAdaptive",
		"github.com/ratelimit-wasm/ratelimit/filter.redisRule",
		"github.com/ratelimit-wasm/ratelimit/filter.(*ruleState).prepareLease",
		"github.com/ratelimit-wasm/ratelimit/filter.(*ruleState).defineLeaseMetrics",
		"github.com/ratelimit-wasm/ratelimit/filter/config.parseDurationFull",
		"github.com/ratelimit-wasm/ratelimit/algorithms.commonError",
		"strconv.appendQuotedWith",
		"runtime.itabInit",
		"strings.Map", // strings.ToLower, which header names go through, is compiled: 2.4 KB, 1.5% of configure
		// The parser's parts for fields a rule does not set, errors and large objects, and
		// the default deny body's template (written out compiled).
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).mode",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).scope",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).adaptiveLimit",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).duplicateName",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).redisRequired",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*decoder).addIndexed",
		"github.com/ratelimit-wasm/ratelimit/filter/config.compileBody",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).shadowOptions",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).outOfRange",
		"github.com/ratelimit-wasm/ratelimit/filter/config.algorithmError",
		"github.com/ratelimit-wasm/ratelimit/filter/config.costAboveCapacity",
		"github.com/ratelimit-wasm/ratelimit/algorithms.unknownAlgorithm",
		"github.com/ratelimit-wasm/ratelimit/filter.logInvalid",
		"bytes.TrimSpace",
		// configure's parts for global, shaping and adaptive rules, overrides and shadow
		// request headers.
		"github.com/ratelimit-wasm/ratelimit/filter.shadowHeaderNames",
		"github.com/ratelimit-wasm/ratelimit/filter.setTickPeriod",
		// The large-object path: a plain configuration and its first request allocate no large
		// object. (The Go
		// heap's second growth, runtime.(*pageAlloc).find and the scavenger, about 11 KB, is
		// compiled in configure: the standard packages' initialisers, unicode's table maps for
		// regexp and netip's unique handles, leave less of
		// _initialize's heap free.)
		"runtime.mallocgcLarge",
		"runtime.(*mcache).allocLarge",
		// Configure's parts for other configurations: the parser's messages, the readers of
		// options a rule does not set, the checks of several rules, and the rare forms of
		// values.
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).unknownField",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).wrongType",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).notOneOf",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).durationRange",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).itemCount",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).tooLong",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).badHeaderName",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).problems",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).invalidJSON",
		"github.com/ratelimit-wasm/ratelimit/filter/config.checkDocument",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).ruleConditions",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).ruleCostShadow",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).ruleResponse",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).ruleAttachments",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).algorithmOptions",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).unusedBy",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).requiredFor",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).queryName",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).constValue",
		"github.com/ratelimit-wasm/ratelimit/filter/config.checkCost",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).badName",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*decoder).duplicate",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).anyInteger",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).checkName",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*parser).overBudget",
		"github.com/ratelimit-wasm/ratelimit/filter/config.overrideCosts",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*decoder).fail",
		"github.com/ratelimit-wasm/ratelimit/algorithms.exactError",
		"github.com/ratelimit-wasm/ratelimit/filter.joinErrors",
		"github.com/ratelimit-wasm/ratelimit/filter.(*ruleState).defineOptionMetrics",
		"github.com/ratelimit-wasm/ratelimit/filter.logReadFailure",
		"strconv.ParseInt",
		"internal/strconv.FormatInt",
		// The request path's parts for other configurations, refusals and failures.
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).duplicateKeyHeader",
		"github.com/ratelimit-wasm/ratelimit/filter.(*plugin).removeShadowHeaders",
		"github.com/ratelimit-wasm/ratelimit/filter.(*ruleState).noKey",
		"github.com/ratelimit-wasm/ratelimit/filter.(*ruleState).overrideFor",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).prepareGlobal",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).decideGlobal",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).settleCommit",
		"github.com/ratelimit-wasm/ratelimit/filter.tellUpstream",
		// The request path's general loops: the general rule loop (overrides, lease blocks,
		// global rules, rules without their key), the general write loop (lease takes, lost
		// races, failures, shadow denials), adaptive and shaping admissions, several
		// draft rules' items, the legacy headers, naming a repeated key part, checking several
		// matched rules for one, a matched-rule list without room, a new context, a filled
		// header cache, a stream other than the last one created.
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).decideFrom",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).finishShaped",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).finishFrom",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).refuseDuplicateKeyHeader",
		"github.com/ratelimit-wasm/ratelimit/filter.appendRateLimitItems",
		"github.com/ratelimit-wasm/ratelimit/filter.(*ruleState).appendNextPolicy",
		"github.com/ratelimit-wasm/ratelimit/filter.appendRateLimitItemAfter",
		"github.com/ratelimit-wasm/ratelimit/filter.(*rateLimitHeaders).appendLegacy",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*Rule).DuplicatePart",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*Rule).duplicatePart",
		// The state layer's parts for keys a fresh table and a new key never meet: previous
		// layouts, keys indexed away from their home slot, home slots another key holds, full
		// groups and evictions, overflow, lost races.
		"github.com/ratelimit-wasm/ratelimit/sharedstate.(*Table).decidePast",
		"github.com/ratelimit-wasm/ratelimit/sharedstate.(*Table).touchGeometry",
		"github.com/ratelimit-wasm/ratelimit/sharedstate.(*Table).chooseVictim",
		"github.com/ratelimit-wasm/ratelimit/sharedstate.(*Table).grantOf",
		"github.com/ratelimit-wasm/ratelimit/sharedstate.(*Table).overflow",
		"github.com/ratelimit-wasm/ratelimit/sharedstate.(*Table).recommit",
		"github.com/ratelimit-wasm/ratelimit/sharedstate.(*Table).decideIndexed",
		"github.com/ratelimit-wasm/ratelimit/sharedstate.(*Table).placeCrowded",
		// The request path's parts a plain allowed request never needs: undecided, queued,
		// observed and refused streams, key sources other than constants, headers and the client
		// IP, rules with conditions, long lengths.
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).settleStream",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).noteResponse",
		"github.com/ratelimit-wasm/ratelimit/abi.rootDone",
		"github.com/ratelimit-wasm/ratelimit/abi.deleteContext",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*Match).matches",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*KeyPart).lookupOther",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).undecided",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).refused",
		"github.com/ratelimit-wasm/ratelimit/filter.logAddFailure",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*CostSpec).headerCost",
		"github.com/ratelimit-wasm/ratelimit/filter.(*decisions).grow",
		"github.com/ratelimit-wasm/ratelimit/filter/config.appendRule",
		"github.com/ratelimit-wasm/ratelimit/filter/config.queryCount",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).decideLeased",
		"github.com/ratelimit-wasm/ratelimit/filter.(*ruleState).appendAdaptivePolicy",
		"github.com/ratelimit-wasm/ratelimit/filter.(*httpContext).decideLocal",
		"github.com/ratelimit-wasm/ratelimit/filter.(*request).cachedLines",
		"github.com/ratelimit-wasm/ratelimit/filter/config.appendQueryPart",
		"github.com/ratelimit-wasm/ratelimit/filter/config.(*KeyPart).appendIPValue",
		"github.com/ratelimit-wasm/ratelimit/filter/config.forwardedFor",
		"github.com/ratelimit-wasm/ratelimit/algorithms.(*bucket).stored",
		"github.com/ratelimit-wasm/ratelimit/algorithms.(*params).locate",
	} {
		// A function that is not in the module (renamed, or inlined into its callers, where
		// V8 would compile it with them) would pass the check below unseen.
		require.True(t, linked[wasmtest.LinkerName(fn)], "%s is not a function of the module", fn)
		require.False(t, got[wasmtest.LinkerName(fn)], "a valid one-rule configure or its first request compiled %s", fn)
	}
	// A key's digest is the state layer's SipHash: a first request compiles no other hash
	// function (hash/maphash and its runtime hash).
	for name := range got {
		require.False(t, strings.HasPrefix(name, wasmtest.LinkerName("hash/maphash.")), "a valid one-rule configure or its first request compiled %s", name)
	}
}

// firstRequestCompileBudget is the most function body bytes a fresh VM's first request may
// make V8 compile, for the one-rule configuration of BenchmarkV8Start. V8 under Envoy's flags
// compiles each function with TurboFan on its first call, so the first request's latency is
// mostly this: with every function compiled ahead (--no-wasm-lazy-compilation) the same request
// takes 1-2 ms of CPU. 64,353 bytes took 71-75 ms of CPU on a quiet machine, so the project's
// 60 ms lies near 54 KB. The first request compiles 59,836 bytes: the filter's 17.9 KB, the
// shared-data key table's 17.6 KB (SipHash included), the key builder's and the matcher's
// 11.3 KB, the ABI's 6.1 KB, net/netip.ParseAddr's 3.8 KB and the token bucket's 3.2 KB. The
// budget is that with a margin of 5%, and unlike wall time it does not depend on the machine's
// load.
const firstRequestCompileBudget = 63_000

// TestV8FirstRequestCompileBudget holds the first request to firstRequestCompileBudget and
// checks that a second request with new keys compiles next to nothing: a change that puts
// code back on the plain request's path (a branch not moved out of line, a new helper
// inlined into several callers) fails here before it shows in BenchmarkV8Start.
func TestV8FirstRequestCompileBudget(t *testing.T) {
	_, compiled, names := firstRequests(t)
	bytes := map[string]int{}
	var first []string
	for _, c := range compiled {
		require.NotZero(t, c.BodyBytes, "V8's trace gave no body size for function %d", c.Index)
		bytes[c.Phase] += c.BodyBytes
		if c.Phase == "request0" {
			first = append(first, fmt.Sprintf("%6d %s", c.BodyBytes, names[c.Index]))
		}
	}
	// The trace is split by step: configure always compiles the parser.
	require.NotZero(t, bytes["configure"], "no function compiled during configure: phase markers not read")
	require.NotZero(t, bytes["request0"], "no function compiled during the first request: phase markers not read")
	t.Logf("first request: %d functions, %d bytes; second request: %d bytes", len(first), bytes["request0"], bytes["request1"])
	require.LessOrEqual(t, bytes["request0"], firstRequestCompileBudget,
		"the first request compiles more than its budget; what it compiles:\n%s", strings.Join(first, "\n"))
	require.LessOrEqual(t, bytes["request1"], 4096, "a second request with new keys compiles more than 4 KB")
}
