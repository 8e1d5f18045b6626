package filter

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/memstore"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// leaseVMs is a proxy's worker VMs natively: several plugins (each with its own VM memory,
// and so its own leases) on one shared store and one fake clock, under one proxytest emulator.
// The emulator runs one plugin context, a switch that hands each new stream to the worker the
// test chose (cur), so every request runs through the emulator as Envoy would run it.
type leaseVMs struct {
	host  proxytest.HostEmulator
	vms   []*plugin
	cur   int
	store *memstore.Memory
	now   int64
}

// leaseSwitch is the emulator's plugin context: it gives each stream to the current worker.
type leaseSwitch struct {
	types.DefaultPluginContext
	l *leaseVMs
}

// NewHttpContext gives the stream to the worker the test chose.
func (s *leaseSwitch) NewHttpContext(id uint32) types.HttpContext {
	return s.l.vms[s.l.cur].NewHttpContext(id)
}

// leaseVMContext creates the switch.
type leaseVMContext struct {
	types.DefaultVMContext
	l *leaseVMs
}

// NewPluginContext returns the switch.
func (v *leaseVMContext) NewPluginContext(uint32) types.PluginContext { return &leaseSwitch{l: v.l} }

func newLeaseVMs(t *testing.T, config string, workers int) *leaseVMs {
	t.Helper()
	l := &leaseVMs{store: memstore.New(), now: t0.UnixNano()}
	host, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(&leaseVMContext{l: l}))
	t.Cleanup(reset)
	require.Equal(t, types.OnPluginStartStatusOK, host.StartPlugin())
	l.host = host
	for range workers {
		p := &plugin{now: func() int64 { return l.now }, store: l.store}
		require.NoError(t, p.configure([]byte(config)))
		l.vms = append(l.vms, p)
	}
	return l
}

// do decides one request (GET /, with headers) on worker w and reports whether it was
// admitted.
func (l *leaseVMs) do(w int, headers ...[2]string) bool {
	l.cur = w
	id := l.host.InitializeHttpContext()
	defer l.host.CompleteHttpContext(id)
	l.host.CallOnRequestHeaders(id, append([][2]string{{":method", "GET"}, {":path", "/"}}, headers...), true)
	return l.host.GetSentLocalResponse(id) == nil
}

// writes returns the number of writes the shared store has taken so far (each successful
// write takes the next cas number; a probe write reads it, and is not counted).
func (l *leaseVMs) writes() int64 {
	const probe = "lease-test-probe"
	_ = l.store.Set(probe, nil, 0)
	_, cas, _ := l.store.Get(probe)
	return int64(cas) - l.probes()
}

func (l *leaseVMs) probes() int64 { probeCount++; return probeCount }

var probeCount int64

// leaseAlgos are the algorithms a lease applies to, with what each promises for a count of
// admissions: bucketLike ones at most burst + rate x d in any interval of length d (the token
// bucket of RFC 2697, the leaky bucket meter, GCRA per ITU-T I.371 with burst tolerance),
// windowed ones at most limit in each aligned window (the fixed window; the sliding window
// counter, whose current window's count alone never passes the limit).
var leaseAlgos = []struct {
	name, algo string
	windowed   bool
}{
	{"token_bucket", `"algorithm":"token_bucket","limit":50,"window":"1s"`, false},
	{"leaky_bucket", `"algorithm":"leaky_bucket","limit":50,"window":"1s"`, false},
	{"gcra", `"algorithm":"gcra","limit":50,"window":"1s"`, false},
	{"fixed_window", `"algorithm":"fixed_window","limit":50,"window":"1s"`, true},
	{"sliding_window", `"algorithm":"sliding_window","limit":50,"window":"1s"`, true},
}

// nativeLeaseDriver runs requests on the native worker VMs of leaseVMs, on its fake clock
// (filtertest.LeaseDriver).
type nativeLeaseDriver struct{ *leaseVMs }

// Advance moves the fake clock by d.
func (l nativeLeaseDriver) Advance(d time.Duration) { l.now += int64(d) }

// Admit sends a request on worker VM w.
func (l nativeLeaseDriver) Admit(_ *testing.T, w int) bool { return l.do(w) }

// TestLeaseBoundNative checks the README's lease bound on random traffic natively, for every
// algorithm a lease applies to (filtertest.LeaseBoundCase.CheckLeaseBound); the emulator
// module's moduletest checks the same cases against the compiled module.
func TestLeaseBoundNative(t *testing.T) {
	for _, c := range filtertest.LeaseBoundCases {
		t.Run(c.Name, func(t *testing.T) {
			c.CheckLeaseBound(t, nativeLeaseDriver{newLeaseVMs(t, c.Config(), c.Workers)})
		})
	}
}

// TestLeaseExactNearTheLimit checks that the batch shrinks as the key's allowance falls: one
// VM and a key with 100 units at one instant admits exactly 100 requests (the lease never
// holds units it cannot spend), and denies the 101st.
func TestLeaseExactNearTheLimit(t *testing.T) {
	for _, a := range leaseAlgos {
		t.Run(a.name, func(t *testing.T) {
			algo := `"algorithm":"` + a.name + `","limit":100,"window":"1h"`
			l := newLeaseVMs(t, `{"rules":[{"name":"hot",`+algo+`,"lease":{"batch":20}}]}`, 1)
			n := 0
			for range 150 {
				if l.do(0) {
					n++
				}
			}
			require.Equal(t, 100, n)
		})
		// Without the lease, the same: decisions are unchanged.
		t.Run(a.name+"/without", func(t *testing.T) {
			algo := `"algorithm":"` + a.name + `","limit":100,"window":"1h"`
			e := newLeaseVMs(t, `{"rules":[{"name":"hot",`+algo+`}]}`, 1)
			m := 0
			for range 150 {
				if e.do(0) {
					m++
				}
			}
			require.Equal(t, 100, m)
		})
	}
}

// Writes returns the writes the shared store has taken so far.
func (l nativeLeaseDriver) Writes() int64 { return l.writes() }

// Metric reads a counter of the filter, which must be defined.
func (l nativeLeaseDriver) Metric(t *testing.T, name string) int64 {
	v, err := l.host.GetCounterMetric(name)
	require.NoError(t, err, name)
	return int64(v)
}

// TestLeaseWritesPerRequest checks what leases are for on a hot key below its limit, natively
// (filtertest.WritesCase.CheckWritesPerRequest); wasmhost/moduletest checks the
// same cases against the compiled module.
func TestLeaseWritesPerRequest(t *testing.T) {
	for _, c := range filtertest.WritesCases {
		t.Run(c.Name(), func(t *testing.T) {
			c.CheckWritesPerRequest(t, nativeLeaseDriver{newLeaseVMs(t, c.Config(), c.Workers)})
		})
	}
}

// TestLeaseTTLGivesUnspentUnitsBack checks that units not spent within the ttl are not spent
// later but given back to the key's state: a VM takes 10 units (spends 2), and after the ttl
// its next request takes again, and the 8 unspent units are back in the shared state.
func TestLeaseTTLGivesUnspentUnitsBack(t *testing.T) {
	l := newLeaseVMs(t, `{"rules":[{"name":"hot","algorithm":"fixed_window","limit":1000,"window":"1h","lease":{"batch":10,"ttl":"100ms"}}]}`, 1)
	w0 := l.writes()
	require.True(t, l.do(0))
	w1 := l.writes()
	require.Greater(t, w1, w0)
	require.True(t, l.do(0)) // from the lease
	require.Equal(t, w1, l.writes())
	l.now += int64(100 * time.Millisecond)
	require.True(t, l.do(0)) // the lease expired: a new take
	require.Greater(t, l.writes(), w1)
	held := l.vms[0].rules[0].lease.held
	require.Len(t, held, 1)
	var units int64
	for _, h := range held {
		units = h.units
	}
	require.EqualValues(t, 2, units, "the new take reserves what the VM spent within the ttl")
	returned, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_returned_total", "hot"))
	require.NoError(t, err)
	require.EqualValues(t, 8, returned)
	var pending sharedstate.Pending
	require.NoError(t, l.vms[0].rules[0].table.Decide(nil, l.now, 1, &pending))
	require.EqualValues(t, 1000-3-units-1, pending.Decision.Remaining, "3 spent, the new lease's units held, less the probe's own 1")
}

// TestLeaseRefundedWhenAnotherRuleDenies checks that a request a lease admitted for one rule
// and another rule denied gives its unit back: the lease's units are unchanged.
func TestLeaseRefundedWhenAnotherRuleDenies(t *testing.T) {
	l := newLeaseVMs(t, `{"rules":[
		{"name":"leased","continue":true,"algorithm":"token_bucket","limit":1000,"window":"1h","lease":{"batch":10}},
		{"name":"tight","algorithm":"fixed_window","limit":2,"window":"1h"}]}`, 1)
	require.True(t, l.do(0))
	require.True(t, l.do(0))
	units := func() int64 {
		for _, h := range l.vms[0].rules[0].lease.held {
			return h.units
		}
		return -1
	}
	before := units()
	require.False(t, l.do(0))
	require.Equal(t, before, units())
}

// BenchmarkLeaseSpend measures a request decided from the VM's lease (the lookup by key and
// the decision), natively: it must allocate nothing.
func BenchmarkLeaseSpend(b *testing.B) {
	l := &leaseState{batch: 1 << 40, ttl: int64(time.Hour), held: map[string]*heldLease{}}
	key := []byte("client-1|tenant")
	l.held[string(key)] = &heldLease{units: 1 << 62, expires: 1 << 62, limit: 100}
	var a applied
	b.ReportAllocs()
	for b.Loop() {
		if !l.spend(&a, key, 1, 1) {
			b.Fatal("not spent")
		}
	}
}

// TestLeaseSpendAllocatesNothing is BenchmarkLeaseSpend's promise as a test.
func TestLeaseSpendAllocatesNothing(t *testing.T) {
	l := &leaseState{batch: 10, ttl: int64(time.Hour), held: map[string]*heldLease{}}
	key := []byte("client-1|tenant")
	l.held[string(key)] = &heldLease{units: 1 << 40, expires: 1 << 62, limit: 100}
	var a applied
	require.Zero(t, testing.AllocsPerRun(100, func() { l.spend(&a, key, 1, 1) }))
}

// rivalStore runs a rival's decision just before the next conditional write, once: another
// worker that consumed allowance between this worker's read and its write.
type rivalStore struct {
	sharedstate.Store
	rival func()
}

// Set runs the armed rival first, then writes under the store's CAS rules.
func (r *rivalStore) Set(key string, value []byte, cas uint32) error {
	if f := r.rival; f != nil && cas != 0 {
		r.rival = nil
		f()
	}
	return r.Store.Set(key, value, cas)
}

// TestLeaseTakeLosingItsRaceFallsBackToExact checks that a take whose write loses its race to
// a worker that took most of what was left is sized and decided again on the fresh state: the
// request is admitted, as an exact decision would admit it, and the reserve is 1/8 of what the
// fresh state leaves.
func TestLeaseTakeLosingItsRaceFallsBackToExact(t *testing.T) {
	l := newLeaseVMs(t, `{"rules":[{"name":"hot","algorithm":"fixed_window","limit":20,"window":"1h","lease":{"batch":8}}]}`, 2)
	rs := &rivalStore{Store: l.store}
	for _, p := range l.vms {
		p.rules[0].table = mustTable(t, p, rs)
	}
	require.True(t, l.do(1)) // VM 1 takes 1 + 19/8: 17 left
	rs.rival = func() {
		var pending sharedstate.Pending
		tab := l.vms[1].rules[0].table
		require.NoError(t, tab.Decide(nil, l.now, 6, &pending))
		require.NoError(t, tab.Commit(&pending))
		require.True(t, pending.Decision.Allowed) // 11 left: VM 0's take sized on 17 is too big
	}
	require.True(t, l.do(0))
	require.Nil(t, rs.rival, "the rival ran")
	var pending sharedstate.Pending
	require.NoError(t, l.vms[1].rules[0].table.Decide(nil, l.now, 1, &pending))
	require.EqualValues(t, 8, pending.Decision.Remaining, "20 - 3 - 6 - (1 + 10/8), less the probe's own 1")
}

// mustTable rebuilds p's first rule's key table on store, as configure built it.
func mustTable(t *testing.T, p *plugin, store sharedstate.Store) *sharedstate.Table {
	t.Helper()
	secret, err := sharedstate.LoadSecret(store)
	require.NoError(t, err)
	r := p.rules[0].rule
	table, err := sharedstate.NewTable(sharedstate.TableConfig{Store: store, Prefix: p.cfg.Domain + "|" + r.Name + "|",
		Slots: 1, Attempts: p.cfg.CASAttempts, Limiter: r.Limiter, Secret: secret})
	require.NoError(t, err)
	return table
}

// A shadow rule observes exact decisions and takes no lease: a lease block on one, local or
// global, is refused when the plugin is configured, with the block's JSON path.
func TestLeaseOnShadowRuleRefused(t *testing.T) {
	for _, scope := range []string{"local", "global"} {
		rules := `[{"name":"hot","scope":"` + scope + `","shadow":true,"algorithm":"token_bucket","limit":1000,"window":"1s","lease":{"batch":100}}]`
		p := &plugin{now: func() int64 { return t0.UnixNano() }, store: memstore.New()}
		err := p.configure([]byte(filtertest.GlobalConfig(filtertest.RedisOpts{}, rules)))
		require.ErrorContains(t, err, "rules[0].lease: not supported on a shadow rule", scope)
	}
}

// A lease must not deny what the exact decision admits: the tests below run one traffic
// pattern twice on the native worker VMs (leaseVMs), once on a rule with a lease block and
// once on the same rule without, on the host's fake clock, and compare the admissions. The
// lease must admit at least 95% of what the exact decision admits, and at most that plus the
// over-admission bound (holders x batch).

// checkLeaseAdmits runs tr natively on local rules without and with a lease, each as a
// subtest of its own (one host emulator at a time), and checks the bounds.
func checkLeaseAdmits(t *testing.T, tr filtertest.LeaseTraffic) {
	run := func(name string, leased bool) (admitted int) {
		t.Run(name, func(t *testing.T) {
			admitted = tr.Admitted(t, nativeLeaseDriver{newLeaseVMs(t, tr.Config(leased), tr.Workers)})
		})
		return admitted
	}
	tr.CheckLeaseAdmits(t, run("exact", false), run("leased", true))
}

// TestLeaseAdmitsPacedTraffic runs filtertest.PacedLeaseTraffic natively on local rules, for
// every algorithm a lease applies to; wasmhost/moduletest runs the same patterns
// against the compiled module.
func TestLeaseAdmitsPacedTraffic(t *testing.T) {
	for _, tr := range filtertest.PacedLeaseTraffic(filtertest.LeaseAlgorithms) {
		t.Run(tr.Name(), func(t *testing.T) { checkLeaseAdmits(t, tr) })
	}
}

// TestLeaseAdmitsTrafficInTurn runs filtertest.LeaseTrafficInTurn natively on local rules, as
// TestLeaseAdmitsPacedTraffic does.
func TestLeaseAdmitsTrafficInTurn(t *testing.T) {
	for _, tr := range filtertest.LeaseTrafficInTurn(filtertest.LeaseAlgorithms) {
		t.Run(tr.Name(), func(t *testing.T) { checkLeaseAdmits(t, tr) })
	}
}

// fillHeld fills rule y's lease map of VM 0 with maxHeld unexpired leases of other keys, as a
// flood of distinct keys within one ttl leaves it.
func fillHeld(l *leaseVMs) *leaseState {
	y := l.vms[0].rules[1].lease
	for i := len(y.held); i < maxHeld; i++ {
		y.held[fmt.Sprint("flood", i)] = &heldLease{units: 1, expires: l.now + int64(time.Hour)}
	}
	return y
}

// AdmitU sends a request with x-u: v on worker VM 0 (filtertest.LeaseMapDriver).
func (l nativeLeaseDriver) AdmitU(_ *testing.T, v string) bool { return l.do(0, hdr("x-u", v)) }

// TestLocalLeaseMapFullDecidesExactly is TestLeaseMapFullDecidesExactly for a local rule
// (filtertest.CheckLeaseMapFull): with the VM's lease map full of other keys' unexpired
// leases, the rule's key is decided exactly and admits its whole limit, and the map stays
// bounded. wasmhost/moduletest runs the same check against the compiled module.
func TestLocalLeaseMapFullDecidesExactly(t *testing.T) {
	require.Equal(t, maxHeld, filtertest.LeaseMapKeys)
	l := newLeaseVMs(t, filtertest.LeaseMapFullConfig, 1)
	filtertest.CheckLeaseMapFull(t, nativeLeaseDriver{l})
	require.Len(t, l.vms[0].rules[0].lease.held, maxHeld, "the map stays bounded")
}

// TestLeaseNewKeyCostBoundedWhenMapFull: a VM whose lease map is full of unexpired leases
// decides a new key exactly, and must not pay for the map's size to find that out: the
// expired leases are found from the oldest take on (leaseState.expire), not by sweeping the
// map on every new key. Measured side by side: recording exact takes of new keys with the map
// full costs at most a few times what it costs with a nearly empty map (where each new key is
// remembered, which is no cheaper).
func TestLeaseNewKeyCostBoundedWhenMapFull(t *testing.T) {
	d := algorithms.Decision{Allowed: true, Limit: 100, Remaining: 50}
	keys := make([][]byte, 2000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("new-client-", i))
	}
	measure := func(fill int) time.Duration {
		l := &leaseState{batch: 10, ttl: int64(time.Hour), held: map[string]*heldLease{}}
		for i := range fill {
			l.taken([]byte(fmt.Sprint("held-", i)), 0, 1, 1, d)
		}
		start := time.Now()
		for _, k := range keys {
			l.taken(k, 1, 1, 1, d)
		}
		return time.Since(start)
	}
	ratio := math.Inf(1)
	for range 3 {
		small, full := measure(16), measure(maxHeld)
		ratio = min(ratio, float64(full)/float64(small))
	}
	t.Logf("new keys cost %.2fx with a full lease map", ratio)
	require.Less(t, ratio, 4.0, "new keys cost %.1fx with a full lease map", ratio)
}
