package moduletest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// Leases against the compiled module: the bound with several worker VMs on the
// virtual clock, shared-data writes per request, and the over-limit cache of a global rule
// against real redis-server and webdis.

// sharedWrites returns how many writes h's shared data has taken: every successful write
// takes the next cas number, so a probe write reads the count (and the probes are taken off).
func sharedWrites(h *wasmhost.Host, probes *int64) int64 {
	const probe = "lease-test-probe"
	h.SetSharedData(probe, nil, 0)
	_, cas, _ := h.GetSharedData(probe)
	*probes++
	return int64(cas) - *probes
}

// doWorker runs one request on worker w and reports whether it was admitted.
func doWorker(t *testing.T, h *wasmhost.Host, w int) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	res, err := h.Do(ctx, wasmhost.Request{Worker: w, Method: "GET", Path: "/", Authority: "example.test",
		SourceAddress: "192.0.2.1:5555", Upstream: &wasmhost.UpstreamResponse{Status: 200}})
	require.NoError(t, err)
	require.False(t, res.Failed)
	return res.Local == nil
}

// virtualLeaseDriver runs requests on chosen worker VMs of a module on the host's virtual
// clock (filtertest.LeaseDriver).
type virtualLeaseDriver struct {
	h     *wasmhost.Host
	clock *wasmhost.VirtualClock
}

// Advance moves the virtual clock by d.
func (d virtualLeaseDriver) Advance(by time.Duration) { d.clock.Advance(by) }

// Admit sends a request on worker VM w.
func (d virtualLeaseDriver) Admit(t *testing.T, w int) bool { return doWorker(t, d.h, w) }

// TestLeaseBoundWasm checks the README's lease bound on the compiled module
// (filtertest.LeaseBoundCase.CheckLeaseBound, which package filter runs natively): several
// worker VMs, each its own Wasm instance with its own leases, share one hot key's state through
// the host's shared data, with random traffic on the virtual clock; and leases were taken.
func TestLeaseBoundWasm(t *testing.T) {
	t.Parallel()
	for _, c := range filtertest.LeaseBoundCases {
		t.Run(c.Name, func(t *testing.T) {
			h, clock := virtualHost(t, c.Config(), c.Workers, nil)
			c.CheckLeaseBound(t, virtualLeaseDriver{h, clock})
			taken, _ := h.Metric("ratelimit_lease_taken_total;rule=hot")
			require.Positive(t, taken)
		})
	}
}

// writesDriver is a virtualLeaseDriver that counts the shared data's writes
// (filtertest.WritesDriver).
type writesDriver struct {
	virtualLeaseDriver
	probes *int64
}

// Writes returns the writes the host's shared data has taken so far.
func (d writesDriver) Writes() int64 { return sharedWrites(d.h, d.probes) }

// Metric reads a counter or gauge of the filter, which must be defined.
func (d writesDriver) Metric(t *testing.T, name string) int64 { return hostMetric(t, d.h, name) }

// TestLeaseWritesPerRequestWasm checks what leases are for on the module: a hot local key
// below its limit (filtertest.WritesCase.CheckWritesPerRequest, which package filter runs
// natively), on worker VMs that each hold their own leases.
func TestLeaseWritesPerRequestWasm(t *testing.T) {
	t.Parallel()
	for _, c := range filtertest.WritesCases {
		t.Run(c.Name(), func(t *testing.T) {
			h, clock := virtualHost(t, c.Config(), c.Workers, nil)
			c.CheckWritesPerRequest(t, writesDriver{virtualLeaseDriver{h, clock}, new(int64)})
		})
	}
}

// BenchmarkLease measures, side by side in one run, the guest time per request of a
// pass-through filter, a local token bucket without and with a lease, and the shared-data
// writes per request (one hot key below its limit, one worker VM, in the wazero host).
func BenchmarkLease(b *testing.B) {
	rule := `{"name":"hot","algorithm":"token_bucket","limit":1000000000,"window":"1s"%s}`
	for _, c := range []struct{ name, module, config string }{
		{"passthrough", "./wasmhost/testdata/passthrough", `{}`},
		{"1rule", ".", `{"rules":[` + fmt.Sprintf(rule, "") + `]}`},
		{"1rule-leased", ".", `{"rules":[` + fmt.Sprintf(rule, `,"lease":{"batch":100}`) + `]}`},
		// The same without rate-limit headers: what the headers cost a leased request.
		{"1rule-leased-noheaders", ".", `{"rules":[` + fmt.Sprintf(rule, `,"lease":{"batch":100},"rate_limit_headers":"none"`) + `]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			h, err := wasmhost.New(context.Background(), wasmtest.BuildGuest(b, c.module), wasmhost.Options{
				Workers: 1, VMID: "bench", PluginConfig: []byte(c.config), SharedData: wasmhost.NewSharedData(),
			})
			require.NoError(b, err)
			defer h.Close(context.Background())
			req := wasmhost.Request{Method: "GET", Path: "/api", Authority: "example.test", SourceAddress: "192.0.2.1:5555",
				Upstream: &wasmhost.UpstreamResponse{Status: 200}}
			ctx := context.Background()
			var probes int64
			w0 := sharedWrites(h, &probes)
			start := h.Stats().GuestTime
			b.ReportAllocs()
			for b.Loop() {
				res, err := h.Do(ctx, req)
				if err != nil || res.Local != nil {
					b.Fatal(err, res.Local)
				}
			}
			b.ReportMetric(float64(h.Stats().GuestTime-start)/float64(b.N), "guest-ns/op")
			b.ReportMetric(float64(sharedWrites(h, &probes)-w0)/float64(b.N), "writes/op")
		})
	}
}

// A lease must not deny what the exact decision admits, on the compiled module: one traffic
// pattern runs on worker VMs of a rule with a lease block and of the same rule without, on
// the virtual clock, and the lease admits at least 95% of what the exact decision admits, and
// no more than that plus holders x batch (filtertest.LeaseTraffic.CheckLeaseAdmits). Package
// filter runs the same patterns natively.

// checkLeaseAdmits runs tr on the module, on the virtual clock, with a lease and, once for
// each traffic pattern (exactRuns holds them by tr.Exact()), without, and checks the bounds.
func checkLeaseAdmits(t *testing.T, tr filtertest.LeaseTraffic, exactRuns map[filtertest.LeaseTraffic]int) {
	run := func(leased bool) int {
		h, clock := virtualHost(t, tr.Config(leased), tr.Workers, nil)
		return tr.Admitted(t, virtualLeaseDriver{h, clock})
	}
	exact, ok := exactRuns[tr.Exact()]
	if !ok {
		exact = run(false)
		exactRuns[tr.Exact()] = exact
	}
	tr.CheckLeaseAdmits(t, exact, run(true))
}

// TestLeaseAdmitsPacedTrafficWasm runs filtertest.PacedLeaseTraffic on the module for every
// algorithm a lease applies to (package filter runs the same patterns natively).
func TestLeaseAdmitsPacedTrafficWasm(t *testing.T) {
	t.Parallel()
	exactRuns := map[filtertest.LeaseTraffic]int{}
	for _, tr := range filtertest.PacedLeaseTraffic(filtertest.LeaseAlgorithms) {
		t.Run(tr.Name(), func(t *testing.T) { checkLeaseAdmits(t, tr, exactRuns) })
	}
}

// TestLeaseAdmitsTrafficInTurnWasm runs filtertest.LeaseTrafficInTurn on the module, as
// TestLeaseAdmitsPacedTrafficWasm does.
func TestLeaseAdmitsTrafficInTurnWasm(t *testing.T) {
	t.Parallel()
	exactRuns := map[filtertest.LeaseTraffic]int{}
	for _, tr := range filtertest.LeaseTrafficInTurn(filtertest.LeaseAlgorithms) {
		t.Run(tr.Name(), func(t *testing.T) { checkLeaseAdmits(t, tr, exactRuns) })
	}
}

// leaseMapDriver runs requests on a module on the virtual clock (filtertest.LeaseMapDriver).
type leaseMapDriver struct{ h *wasmhost.Host }

// AdmitU sends a request with x-u: v.
func (d leaseMapDriver) AdmitU(t *testing.T, v string) bool {
	o, _ := doTimed(t, d.h, hdr("x-u", v))
	return o.Status == 0
}

// Metric reads a counter of the filter, which must be defined.
func (d leaseMapDriver) Metric(t *testing.T, name string) int64 { return hostMetric(t, d.h, name) }

// TestLeaseWasmMapFullDecidesExactly: the compiled module on the virtual clock, one worker: a
// key its full lease map does not hold is decided exactly (filtertest.CheckLeaseMapFull, which
// package filter runs natively as TestLocalLeaseMapFullDecidesExactly; its
// TestLeaseMapFullDecidesExactly checks global rules).
func TestLeaseWasmMapFullDecidesExactly(t *testing.T) {
	t.Parallel()
	h, _ := virtualHost(t, filtertest.LeaseMapFullConfig, 1, nil)
	filtertest.CheckLeaseMapFull(t, leaseMapDriver{h})
	require.Zero(t, h.Stats().Traps)
}
