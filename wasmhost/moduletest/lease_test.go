package moduletest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
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

// TestLeaseBoundWasm checks the README's lease bound on the compiled module: several worker
// VMs (each its own Wasm instance, with its own leases) share one hot key's token bucket
// through the host's shared data; random traffic on the virtual clock. In any interval the
// admissions stay within burst + rate x d + workers x batch, and from the start within
// burst + rate x d.
func TestLeaseBoundWasm(t *testing.T) {
	t.Parallel()
	const (
		workers      = 4
		limit, batch = 50, 10
		window       = int64(time.Second)
	)
	h, clock := virtualHost(t, `{"rules":[{"name":"hot","algorithm":"token_bucket","limit":50,"window":"1s",
		"lease":{"batch":10,"ttl":"500ms"}}]}`, workers, nil)
	rng := rand.New(rand.NewPCG(4, 13))
	var admitted []int64
	var elapsed int64
	for range 1500 {
		gap := rng.Int64N(int64(10 * time.Millisecond))
		clock.Advance(time.Duration(gap))
		elapsed += gap
		if doWorker(t, h, rng.IntN(workers)) {
			admitted = append(admitted, elapsed)
		}
	}
	rate := func(d int64) int64 { return limit * d / window }
	// Every pair of admissions is checked; require runs only for a pair over its bound, since
	// a require call costs microseconds and there are about a million pairs.
	for i := range admitted {
		if n, bound := int64(i+1), limit+rate(admitted[i]); n > bound {
			require.LessOrEqual(t, n, bound, "from the start to admission %d", i)
		}
		for j := i; j < len(admitted); j++ {
			if n, bound := int64(j-i+1), limit+rate(admitted[j]-admitted[i])+workers*batch; n > bound {
				require.LessOrEqual(t, n, bound, "admissions %d..%d", i, j)
			}
		}
	}
	require.GreaterOrEqual(t, int64(len(admitted)), rate(elapsed)/2)
	taken, _ := h.Metric("ratelimit_lease_taken_total;rule=hot")
	require.Positive(t, taken)
}

// TestLeaseWritesPerRequestWasm checks what leases are for, on the module: a hot local key
// below its limit costs at most 0.1 shared-data writes per request with a lease, on 8 worker
// VMs, with no compare-and-swap exhausted; without the lease one write per request.
func TestLeaseWritesPerRequestWasm(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		lease  string
		lo, hi float64
	}{{`,"lease":{"batch":100}`, 0, 0.1}, {"", 1, 1.01}} {
		t.Run(fmt.Sprintf("lease=%v", c.lease != ""), func(t *testing.T) {
			h, _ := virtualHost(t, `{"rules":[{"name":"hot","algorithm":"token_bucket","limit":1000000000,"window":"1s"`+c.lease+`}]}`, 8, nil)
			var probes int64
			before := sharedWrites(h, &probes)
			const reqs = 800
			for i := range reqs {
				require.True(t, doWorker(t, h, i%8))
			}
			per := float64(sharedWrites(h, &probes)-before) / reqs
			t.Logf("lease %q: %.3f shared-data writes per request", c.lease, per)
			require.GreaterOrEqual(t, per, c.lo)
			require.LessOrEqual(t, per, c.hi)
			ex, _ := h.Metric("ratelimit_cas_exhausted_total;rule=hot")
			require.Zero(t, ex)
		})
	}
}

// TestOverLimitCacheWasm checks the over-limit cache of a global rule with a lease block
// against real redis-server and webdis: once Redis has denied a key, the proxy denies it with
// no callout until Retry-After has passed, counted in over_limit_cache_hits; another key still
// asks Redis. Without the lease block every denial is a callout.
func TestOverLimitCacheWasm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, leased := range []bool{true, false} {
		t.Run(fmt.Sprintf("lease=%v", leased), func(t *testing.T) {
			lease := ""
			if leased {
				lease = `,"lease":{"batch":2}`
			}
			name := fmt.Sprintf("olc%v", leased)
			rules := "[" + globalRule(name, `"algorithm":"fixed_window","limit":3,"window":"1h"`+lease, true) + "]"
			h := newGlobalHost(t, globalConfig(redisOpts{FailureMode: "deny"}, rules), srv.WebdisURL(), 2)
			for range 3 {
				o, _ := doTimed(t, h, hdr("x-user", "alice"))
				require.Zero(t, o.Status)
			}
			o, _ := doTimed(t, h, hdr("x-user", "alice"))
			require.Equal(t, 429, o.Status)
			calls := redisMetric(h, "ratelimit_redis_calls_total")
			// Both workers, five more denials each.
			for range 10 {
				o, _ := doTimed(t, h, hdr("x-user", "alice"))
				require.Equal(t, 429, o.Status)
				require.NotEmpty(t, o.Headers["retry-after"])
			}
			hits := redisMetric(h, "ratelimit_over_limit_cache_hits_total;rule="+name)
			if leased {
				// The worker that saw Redis's denial caches it; the other asks Redis once.
				require.EqualValues(t, calls+1, redisMetric(h, "ratelimit_redis_calls_total"))
				require.EqualValues(t, 9, hits)
			} else {
				require.EqualValues(t, calls+10, redisMetric(h, "ratelimit_redis_calls_total"))
				require.Zero(t, hits)
			}
			// Another key is not affected.
			o, _ = doTimed(t, h, hdr("x-user", "bob"))
			require.Zero(t, o.Status)
			requireNoRedisFailures(t, h)
			requireCleanLogs(t, h)
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

// TestGlobalLeaseWasm checks global leases on the compiled module against real redis-server
// and webdis, with two proxies (two hosts, each with its own shared data) of several worker
// VMs on one Redis:
//   - near the limit the batches shrink to the request's cost with the remaining allowance
//     Redis reports: a fixed window of 100 admits exactly 100 requests of 160 taking turns over
//     2 proxies x 2 VMs, as without a lease, with fewer callouts than requests;
//   - on a hot key below its limit, 2 proxies x 4 VMs send at most 0.05 callouts per request
//     (batch 100: each VM's first take, then one per 100 requests).
func TestGlobalLeaseWasm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	do := func(h *wasmhost.Host, w int) bool {
		t.Helper()
		req := globalRequest(hdr("x-user", "alice"))
		req.Worker = w
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
		defer cancel()
		res, err := h.Do(ctx, req)
		require.NoError(t, err)
		require.False(t, res.Failed)
		return res.Local == nil
	}
	calls := func(hs []*wasmhost.Host) (n int64) {
		for _, h := range hs {
			n += redisMetric(h, "ratelimit_redis_calls_total")
		}
		return n
	}
	t.Run("exact near the limit", func(t *testing.T) {
		filtertest.WaitForHourWindow(t, srv)
		for _, leased := range []bool{true, false} {
			lease := ""
			if leased {
				lease = `,"lease":{"batch":20,"ttl":"1m"}`
			}
			name := fmt.Sprintf("gl-exact-%v", leased)
			rules := "[" + globalRule(name, `"algorithm":"fixed_window","limit":100,"window":"1h"`+lease, true) + "]"
			cfg := globalConfig(redisOpts{FailureMode: "deny"}, rules)
			hs := []*wasmhost.Host{newGlobalHost(t, cfg, srv.WebdisURL(), 2), newGlobalHost(t, cfg, srv.WebdisURL(), 2)}
			admitted := 0
			for i := range 160 {
				if do(hs[i%2], (i/2)%2) {
					admitted++
				}
			}
			require.Equal(t, 100, admitted, "lease %v", leased)
			n := calls(hs)
			if leased {
				require.Less(t, n, int64(160))
				taken := redisMetric(hs[0], "ratelimit_lease_taken_total;rule="+name) +
					redisMetric(hs[1], "ratelimit_lease_taken_total;rule="+name)
				require.Positive(t, taken)
			} else {
				// Every admission is a callout; the denials after the first are not (without a
				// lease block there is no over-limit cache either).
				require.EqualValues(t, 160, n)
			}
			for _, h := range hs {
				requireNoRedisFailures(t, h)
			}
			t.Logf("lease %v: %d callouts for 160 requests", leased, n)
		}
	})
	t.Run("callouts per request below the limit", func(t *testing.T) {
		rules := "[" + globalRule("gl-hot", `"algorithm":"token_bucket","limit":1000000000,"window":"1h","lease":{"batch":100}`, true) + "]"
		cfg := globalConfig(redisOpts{FailureMode: "deny"}, rules)
		hs := []*wasmhost.Host{newGlobalHost(t, cfg, srv.WebdisURL(), 4), newGlobalHost(t, cfg, srv.WebdisURL(), 4)}
		const requests = 4000
		for i := range requests {
			require.True(t, do(hs[i%2], (i/2)%4))
		}
		per := float64(calls(hs)) / requests
		t.Logf("%.4f callouts per request on 2 proxies x 4 VMs", per)
		require.LessOrEqual(t, per, 0.05)
	})
}
