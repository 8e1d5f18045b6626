package filter

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/memstore"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Global leases natively, against a real redis-server and webdis: several proxies (each with
// its own shared data) of several worker VMs (each with its own leases) on one Redis, under
// one proxytest emulator. The driver relays every callout to webdis over HTTP and appends the
// test's fake clock to the script call (the script's test-only explicit clock, see
// sharedstate/redis/lua/main.lua), so Redis decides at the fake instant and hours of traffic
// take seconds.

// newGlobalFleet makes proxies x workers worker VMs of config: VM w belongs to proxy
// w / workers, and the VMs of one proxy share one store.
func newGlobalFleet(t *testing.T, config string, proxies, workers int) *leaseVMs {
	t.Helper()
	l := &leaseVMs{now: t0.UnixNano()}
	host, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(&leaseVMContext{l: l}))
	t.Cleanup(reset)
	require.Equal(t, types.OnPluginStartStatusOK, host.StartPlugin())
	l.host = host
	for range proxies {
		store := memstore.New()
		for range workers {
			p := &plugin{now: func() int64 { return l.now }, store: store}
			require.NoError(t, p.configure([]byte(config)))
			if p.redis != nil && len(p.redis.parts) > 0 {
				// The VMs know the partition secret from the start, so that each request
				// makes the calls its rules need and no more (reading the secret is tested on
				// its own: partitionsecret_test.go).
				p.redis.learnSecret(fleetSecret, l.now)
			}
			l.vms = append(l.vms, p)
		}
	}
	return l
}

// addVM adds a worker VM of config, of a proxy of its own, to the fleet and returns its index:
// a proxy whose rules share Redis keys with the fleet's (same domain, key prefix and rule
// names), for example the same rule without its lease block.
func (l *leaseVMs) addVM(t *testing.T, config string) int {
	t.Helper()
	p := &plugin{now: func() int64 { return l.now }, store: memstore.New()}
	require.NoError(t, p.configure([]byte(config)))
	if p.redis != nil && len(p.redis.parts) > 0 {
		p.redis.learnSecret(fleetSecret, l.now)
	}
	l.vms = append(l.vms, p)
	return len(l.vms) - 1
}

// doRelayed decides one request with the given headers on worker VM w, relaying its callouts
// to webdis at url with the fake clock, and reports whether it was admitted and how many
// callouts it made.
func (l *leaseVMs) doRelayed(t *testing.T, w int, url string, headers ...[2]string) (admitted bool, callouts int) {
	t.Helper()
	l.cur = w
	id := l.host.InitializeHttpContext()
	defer l.host.CompleteHttpContext(id)
	action := l.host.CallOnRequestHeaders(id, append([][2]string{{":method", "GET"}, {":path", "/"}}, headers...), true)
	for ; action == types.ActionPause && l.host.GetSentLocalResponse(id) == nil; callouts++ {
		all := l.host.GetCalloutAttributesFromContext(id)
		require.Greater(t, len(all), callouts, "paused without a callout")
		l.answerAt(t, url, all[callouts])
		action = l.host.GetCurrentHttpStreamAction(id)
	}
	if callouts == 0 {
		callouts = len(l.host.GetCalloutAttributesFromContext(id))
	}
	return l.host.GetSentLocalResponse(id) == nil, callouts
}

// globalRule is one global rule named hot with algo and an optional lease block.
func globalRule(algo, lease string) string {
	return `[{"name":"hot","scope":"global",` + algo + lease + `}]`
}

// expiredKeys returns how many keys Redis has expired on its own clock so far (expired_keys
// of INFO stats).
func expiredKeys(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, _ := srv.MustDo("INFO", "stats").(string)
	_, rest, found := strings.Cut(info, "\nexpired_keys:")
	require.True(t, found, "INFO stats has no expired_keys")
	line, _, _ := strings.Cut(rest, "\r\n")
	n, err := strconv.ParseInt(line, 10, 64)
	require.NoError(t, err)
	return n
}

// TestGlobalLeaseBound checks the bound of the README's lease section for global rules on
// random traffic, for every algorithm a lease applies to, with 2 proxies of 3 worker VMs (6
// lease holders) on one Redis and a fake clock: within any interval the admissions never
// exceed the algorithm's own contract by more than holders x batch; from the start (nobody
// held units) they never exceed it at all; with and without redis.partitions.
//
// Redis decides at the fake instant, but it expires keys on its own clock: a write sets the
// key's TTL to its reset time (on the fake clock) plus a second, and an expired key reads as
// a fresh one (sharedstate/redis/doc.go). On clocks that agree, the key had refilled by then
// and the expiry grants nothing. The fake clock does not move while the test process stalls,
// so a stall longer than the key's TTL (1.56 s was seen on the loaded 2-core machine) makes
// Redis drop a key that the fake clock has not refilled, and the next call finds its full
// allowance. The bound is therefore stated over the time that really passed: when Redis
// expired a key during the run, an admission's contract also covers the real time elapsed
// since the run began (redis-server runs on this machine, on the same wall clock). That is
// what an expiry can grant: for a bucket (token bucket, leaky bucket meter, GCRA) an expiry
// is the key's clock jumping by its reset time, which passed on Redis's clock between the
// key's last write and the expiry, and the expiries' gaps do not overlap; for a windowed
// algorithm an expiry gives at most one fresh window's limit. Without an expiry, in every
// run that does not stall for a second, the bound is exact on the fake clock, and one unit
// admitted beyond it fails the test.
func TestGlobalLeaseBound(t *testing.T) {
	srv := redistest.Start(t)
	const (
		limit, batch           = 50, 10
		proxies, workers       = 2, 3
		window                 = int64(time.Second)
		requests               = 1500
		holders                = proxies * workers
		excess           int64 = holders * batch
	)
	for i := range 2 * len(leaseAlgos) {
		// Every algorithm in one Redis slot, and over redis.partitions 4 (one call per rule).
		a, parts := leaseAlgos[i%len(leaseAlgos)], 4*(i/len(leaseAlgos))
		t.Run(fmt.Sprintf("%s/partitions=%d", a.name, parts), func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			cfg := filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts}, globalRule(a.algo, `,"lease":{"batch":10,"ttl":"500ms"}`))
			l := newGlobalFleet(t, cfg, proxies, workers)
			rng := rand.New(rand.NewPCG(uint64(i), 13))
			start := l.now
			expiredBefore, realStart := expiredKeys(t, srv), time.Now().UnixNano()
			// admitted holds each admission's fake instant, real the real time elapsed by
			// then (what Redis's clock may have granted, see above).
			var admitted, real []int64
			calls := 0
			for range requests {
				// About 200 requests per second against a limit of 50: bursts, quiet spells
				// and sustained overload, spread over every VM of every proxy.
				l.now += rng.Int64N(int64(10 * time.Millisecond))
				ok, n := l.doRelayed(t, rng.IntN(holders), srv.WebdisURL())
				calls += n
				if ok {
					admitted = append(admitted, l.now-start)
					real = append(real, time.Now().UnixNano()-realStart)
				}
			}
			// expired is how many keys Redis expired on its own clock during the run;
			// without one, Redis's clock granted nothing and the bound is exact.
			expired := expiredKeys(t, srv) - expiredBefore
			if expired > 0 {
				t.Logf("Redis expired %d keys on its own clock in %v of real time: the bound covers that time too",
					expired, time.Duration(time.Now().UnixNano()-realStart))
			} else {
				clear(real)
			}
			rate := func(d int64) int64 { return limit * d / window }
			// Every pair of admissions is checked; require runs only for a pair over its bound
			// (see TestLeaseBoundNative).
			for i := range admitted {
				if n, bound := int64(i+1), limit+rate(admitted[i]+real[i]); !a.windowed && n > bound {
					require.LessOrEqual(t, n, bound, "from the start to admission %d", i)
				}
				for j := i; j < len(admitted); j++ {
					n := int64(j - i + 1)
					if a.windowed {
						if admitted[j]/window != admitted[i]/window {
							break
						}
						if bound := limit + excess + expired*limit; n > bound {
							require.LessOrEqual(t, n, bound, "window %d", admitted[i]/window)
						}
						if bound := limit + expired*limit; admitted[i]/window == 0 && n > bound {
							require.LessOrEqual(t, n, bound, "the first window")
						}
					} else if bound := limit + rate(admitted[j]-admitted[i]+real[j]) + excess; n > bound {
						// An expiry found between admissions i and j may have followed a
						// write before i: its gap lies within the run up to j.
						require.LessOrEqual(t, n, bound, "admissions %d..%d", i, j)
					}
				}
			}
			// Under-admission is bounded by the units dropped: at least half of the contract.
			require.GreaterOrEqual(t, int64(len(admitted)), rate(l.now-start)/2)
			t.Logf("%d admitted of %d, %d callouts", len(admitted), requests, calls)
		})
	}
}

// TestGlobalLeaseExactNearTheLimit checks that global batches shrink with the remaining
// allowance Redis reports: with 2 proxies of 2 VMs taking turns on a key with 100 units at one
// instant, exactly 100 requests pass (no unit is stranded or denied that an exact decision
// would admit), with fewer callouts than requests; and the same with redis.partitions 4.
// Without the lease block, the same 100 pass with one callout each.
func TestGlobalLeaseExactNearTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{0, 4} {
		for _, a := range leaseAlgos {
			for _, lease := range []string{`,"lease":{"batch":20,"ttl":"1m"}`, ""} {
				t.Run(fmt.Sprintf("%s/partitions=%d/lease=%v", a.name, parts, lease != ""), func(t *testing.T) {
					srv.MustDo("FLUSHALL")
					algo := `"algorithm":"` + a.name + `","limit":100,"window":"1h"`
					cfg := filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts}, globalRule(algo, lease))
					l := newGlobalFleet(t, cfg, 2, 2)
					admitted, calls := 0, 0
					for i := range 160 {
						ok, n := l.doRelayed(t, i%4, srv.WebdisURL())
						calls += n
						if ok {
							admitted++
						}
					}
					require.Equal(t, 100, admitted)
					if lease != "" {
						require.Less(t, calls, 160)
					} else {
						require.Equal(t, 160, calls)
					}
					t.Logf("%d callouts for 160 requests", calls)
				})
			}
		}
	}
}

// TestGlobalLeaseCalloutsPerRequest checks what leases are for on a hot key below its limit:
// at most 0.05 Redis callouts per request with a lease (batch 100: 0.01), one without.
func TestGlobalLeaseCalloutsPerRequest(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range []struct {
		lease string
		max   float64
	}{{`,"lease":{"batch":100}`, 0.05}, {"", 1}} {
		t.Run(c.lease, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			algo := `"algorithm":"token_bucket","limit":1000000000,"window":"1h"`
			l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, globalRule(algo, c.lease)), 1, 1)
			const requests = 2000
			calls := 0
			for range requests {
				l.now += int64(time.Millisecond)
				ok, n := l.doRelayed(t, 0, srv.WebdisURL())
				require.True(t, ok)
				calls += n
			}
			per := float64(calls) / requests
			t.Logf("%.4f callouts per request", per)
			require.LessOrEqual(t, per, c.max)
			if c.lease == "" {
				require.Equal(t, 1.0, per)
			}
		})
	}
}

// TestGlobalLeaseDeniedBatchChargesNothing checks what all-or-nothing means with a lease: a
// batch Redis denies fails the whole call, which writes nothing on the request's other global
// rules, and a second call decides the request at its own cost. The leased rule (limit 5) asks
// for 3 units first (1 + 16/8: the VM has not seen the key), of which another proxy, whose
// rule has no lease, has left 2; the unleased rule (limit 2) must then have been charged once
// per admitted request, so exactly 2 pass. Had the denied batch's call charged it, 1 would.
// With redis.partitions 4 each rule has its own call and only the leased rule's is sent again.
func TestGlobalLeaseDeniedBatchChargesNothing(t *testing.T) {
	srv := redistest.Start(t)
	rules := `[{"name":"leased","scope":"global","algorithm":"fixed_window","limit":16,"window":"1h",
		"continue":true,"lease":{"batch":100}},
		{"name":"exact","scope":"global","algorithm":"fixed_window","limit":2,"window":"1h"}]`
	unleased := `[{"name":"leased","scope":"global","algorithm":"fixed_window","limit":16,"window":"1h"}]`
	for _, parts := range []int{0, 4} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts}, rules), 1, 1)
			other := l.addVM(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts}, unleased))
			for range 14 {
				ok, _ := l.doRelayed(t, other, srv.WebdisURL())
				require.True(t, ok)
			}
			noscript0, err := l.host.GetCounterMetric("ratelimit_redis_noscript_total")
			require.NoError(t, err)
			ok, calls := l.doRelayed(t, 0, srv.WebdisURL())
			require.True(t, ok, "the batch does not fit, the request's own cost does")
			noscript, err := l.host.GetCounterMetric("ratelimit_redis_noscript_total")
			require.NoError(t, err) // a fresh Redis: the first calls load the script
			want := 2               // the call with the denied batch, then the request at its cost
			if parts > 0 {
				want = 3 // each rule's call, then the leased rule's again
			}
			require.Equal(t, want, calls-int(noscript-noscript0))
			admitted := 1
			for range 5 {
				if ok, _ := l.doRelayed(t, 0, srv.WebdisURL()); ok {
					admitted++
				}
			}
			require.Equal(t, 2, admitted)
		})
	}
}

// TestGlobalLeaseMetrics checks the lease metrics of a global rule, under the rule's labelled
// names: a take that reserved units counts lease_taken; units left when the ttl passes are
// given back in the key's next take's call and count lease_units_returned when the script
// applies them to the key's state, lease_units_dropped when it takes nothing back (a fixed
// window's units given back in a later window than their take's, a token bucket's once the
// bucket has refilled).
func TestGlobalLeaseMetrics(t *testing.T) {
	for _, tc := range []struct {
		name, algo        string
		after             time.Duration
		returned, dropped int
	}{
		{"taken back", `"algorithm":"token_bucket","limit":1000,"window":"1h"`, 2 * time.Second, 7, 0},
		{"window passed", `"algorithm":"fixed_window","limit":1000,"window":"1m"`, 2 * time.Minute, 0, 7},
		{"bucket full", `"algorithm":"token_bucket","limit":100,"window":"1s"`, 2 * time.Second, 0, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, globalRule(tc.algo, `,"lease":{"batch":10,"ttl":"1s"}`)), 1, 1)
			for range 3 {
				ok, _ := l.doRelayed(t, 0, srv.WebdisURL())
				require.True(t, ok)
			}
			l.now += int64(tc.after)
			ok, calls := l.doRelayed(t, 0, srv.WebdisURL())
			require.True(t, ok)
			require.Equal(t, 1, calls, "the lease expired: a new take, carrying its 7 units back")
			taken, err := l.host.GetCounterMetric(statName("ratelimit_lease_taken_total", "hot"))
			require.NoError(t, err)
			require.EqualValues(t, 2, taken)
			returned, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_returned_total", "hot"))
			require.NoError(t, err)
			require.EqualValues(t, tc.returned, returned, "10 taken, 3 spent")
			dropped, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "hot"))
			require.NoError(t, err)
			require.EqualValues(t, tc.dropped, dropped, "10 taken, 3 spent")
		})
	}
}

// TestGlobalOverLimitCachePartitioned checks the over-limit cache with redis.partitions 4,
// where each rule has its own call: once Redis has denied the key, the next denials cost no
// callout, and are counted as cache hits.
func TestGlobalOverLimitCachePartitioned(t *testing.T) {
	srv := redistest.Start(t)
	algo := `"algorithm":"fixed_window","limit":3,"window":"1h"`
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4}, globalRule(algo, `,"lease":{"batch":2}`)), 1, 1)
	admitted := 0
	for range 4 {
		if ok, _ := l.doRelayed(t, 0, srv.WebdisURL()); ok {
			admitted++
		}
	}
	require.Equal(t, 3, admitted)
	for range 5 {
		ok, calls := l.doRelayed(t, 0, srv.WebdisURL())
		require.False(t, ok)
		require.Zero(t, calls)
	}
	hits, err := l.host.GetCounterMetric(statName("ratelimit_over_limit_cache_hits_total", "hot"))
	require.NoError(t, err)
	require.EqualValues(t, 5, hits)
}

// The over-limit cache keeps a denial only as long as the rule's longest meaningful wait: a
// hostile or broken answer with a retry-after of 2^53 ns (about 104 days) is clamped like the
// Retry-After header, so a day later the key goes to Redis again instead of staying locked
// out on this worker.
func TestOverLimitCacheClampsTheWait(t *testing.T) {
	cfg := `{"redis":{"cluster":"webdis","timeout":"40ms","failure_mode":"allow"},
	"rules":[{"name":"g","scope":"global","lease":{"batch":10},"key":[{"source":"header","name":"x-api-key"}],
	"algorithm":"gcra","limit":5,"window":"1m"}]}`
	d := newNative(t, cfg)
	id, callout := d.startGlobal(t, "a")
	// The first call asks for a batch; Redis denies it, and the filter asks again for the
	// request's own cost (see leaseGlobal), which Redis denies too.
	for range 2 {
		if d.host.GetSentLocalResponse(id) != nil {
			break
		}
		d.answerScript(id, callout, `{"EVALSHA":[1764504000,0,0,%s,0,5,0,9007199254740992,9007199254740992,0]}`)
		c := d.host.GetCalloutAttributesFromContext(id)
		callout = c[len(c)-1].CalloutID
	}
	require.NotNil(t, d.host.GetSentLocalResponse(id))
	*d.now = d.now.Add(24 * time.Hour)
	id2, _ := d.startGlobal(t, "a")
	require.Nil(t, d.host.GetSentLocalResponse(id2), "a day later the key is still denied from the cache")
}

// TestGlobalLeaseGiveBackInFailedCall: the unspent units of a global lease ride in the key's
// next take; when that call fails (Redis answers 503) they are counted dropped, never lost
// from the counts: for two leased rules, with one call for both and with one call per rule
// (partitions), where the first failure denies the request (failure_mode deny) and the second
// rule's answer arrives after it.
func TestGlobalLeaseGiveBackInFailedCall(t *testing.T) {
	for _, partitions := range []int{0, 4} {
		t.Run(fmt.Sprint("partitions=", partitions), func(t *testing.T) {
			srv := redistest.Start(t)
			loadScripts(srv)
			lease := `"algorithm":"fixed_window","limit":100,"window":"1h","lease":{"batch":10,"ttl":"1s"}`
			rules := `[{"name":"x","scope":"global","continue":true,` + lease + `},{"name":"y","scope":"global",` + lease + `}]`
			l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: partitions}, rules), 1, 1)
			for range 3 {
				ok, _ := l.doRelayed(t, 0, srv.WebdisURL())
				require.True(t, ok)
			}
			l.now += int64(2 * time.Second)
			id := l.host.InitializeHttpContext()
			l.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}}, true)
			out := l.host.GetCalloutAttributesFromContext(id)
			require.Len(t, out, max(1, min(partitions, 2)))
			for _, c := range out {
				l.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "503"}}, nil, nil)
			}
			require.NotNil(t, l.host.GetSentLocalResponse(id), "failure_mode deny")
			l.host.CompleteHttpContext(id)
			for _, rule := range []string{"x", "y"} {
				returned, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_returned_total", rule))
				require.NoError(t, err)
				require.Zero(t, returned, rule)
				dropped, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", rule))
				require.NoError(t, err)
				require.EqualValues(t, 7, dropped, "rule %s: 10 taken, 3 spent, 7 carried by the failed call", rule)
			}
		})
	}
}
