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

// Calls that Redis answers after the client reset the stream, natively against a real
// redis-server and webdis on the fake clock of newGlobalFleet: with redis.partitions 1 (the
// request's one call, lateAnswer) and 4 (one call per rule, lateShardAnswer). A lease batch
// such a call commits is held, or counted as dropped when it cannot be; breaker_test.go and
// global_test.go check that such answers are heard by the breaker and measured.

// resetMidCall starts a request with headers on worker VM w and resets its stream while its
// callouts are out (startReset), then has webdis at url answer every callout and deletes the
// stream's context. It returns the number of callouts.
func (l *leaseVMs) resetMidCall(t *testing.T, w int, url string, headers ...[2]string) int {
	t.Helper()
	id, calls := l.startReset(t, w, headers...)
	for _, c := range calls {
		l.answerAt(t, url, c)
	}
	require.Nil(t, l.host.GetSentLocalResponse(id), "nothing is sent on a gone stream")
	l.host.CompleteHttpContext(id)
	return len(calls)
}

// startReset starts a request with headers on worker VM w and resets its stream while its
// callouts are out: the filter's OnHttpStreamDone runs before any answer is delivered, as
// Envoy's proxy_on_log does for a stream the client reset. It returns the stream and its
// callouts, which the caller answers and then deletes the stream (CompleteHttpContext): the
// SDK's emulator drops the answer of a deleted stream, so the context is deleted only after
// the answers; on a Wasm host abi.DispatchHttpCallAlways delivers them on the root context
// instead (wasmhost/moduletest tests that).
func (l *leaseVMs) startReset(t *testing.T, w int, headers ...[2]string) (uint32, []proxytest.HttpCalloutAttribute) {
	t.Helper()
	l.cur = w
	// NewHttpContext reuses the VM's last free context: offering it this one gives the test
	// the stream's context, whose OnHttpStreamDone the emulator calls only with the deletion.
	h := &httpContext{}
	l.vms[w].contexts = append(l.vms[w].contexts, h)
	id := l.host.InitializeHttpContext()
	action := l.host.CallOnRequestHeaders(id, append([][2]string{{":method", "GET"}, {":path", "/"}}, headers...), true)
	require.Equal(t, types.ActionPause, action, "the request waits for Redis")
	require.Equal(t, id, h.id, "the stream got the offered context")
	calls := l.host.GetCalloutAttributesFromContext(id)
	require.NotEmpty(t, calls)
	h.OnHttpStreamDone()
	require.True(t, h.done)
	return id, calls
}

// leasedY is a global rule x (exact, limit xLimit per x-k) and a leased global rule y (1000
// an hour per x-y, batches of 10) in partitions partitions; maxKeys bounds y's keys (0: no
// bound).
func leasedY(partitions, xLimit, maxKeys int) string {
	bound := ""
	if maxKeys > 0 {
		bound = fmt.Sprintf(`"max_keys":%d,`, maxKeys)
	}
	rules := fmt.Sprintf(`[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":%d,"window":"1h"},`, xLimit) +
		`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h",` + bound + `"lease":{"batch":10,"ttl":"1m"}}]`
	return filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: partitions}, rules)
}

// yTokens returns the tokens Redis holds for y's key k, in the token bucket's nanoseconds of
// refill (3.6 s a token at 1000 an hour), or -1 when the key does not exist.
func yTokens(t *testing.T, srv *redistest.Server, k string) int64 {
	t.Helper()
	// Partitioned keys first (rl:{rl:y:<p>}:...), then the domain's one slot (rl:{rl}:y:...).
	keys := srv.MustDo("KEYS", "rl:{rl:y:*}:*:"+k).([]any)
	if len(keys) == 0 {
		keys = srv.MustDo("KEYS", "rl:{rl}:y:*:"+k).([]any)
	}
	if len(keys) == 0 {
		return -1
	}
	require.Len(t, keys, 1)
	var n int64
	_, err := fmt.Sscan(fmt.Sprint(srv.MustDo("HGET", fmt.Sprint(keys[0]), "t")), &n)
	require.NoError(t, err)
	return n
}

// yKey is how y's lease map names the key of x-y: late (the descriptor: each key part's length
// and value).
const yKey = "4:late"

// tokens is n tokens of y in the token bucket's unit.
func tokens(n int64) int64 { return n * int64(3600*time.Millisecond) }

// TestLateBatchIsHeld: a request's call asks Redis for y's lease batch and the client resets
// the stream before the answer arrives. Redis commits the call (x admits, y's batch of 10
// fits), so the ten units are debited: the VM holds them as its lease on the key, the reset
// request's own unit included (it spent none), and the key's next ten requests are admitted
// for y with no unit asked of Redis. With partitions 1 this is lateAnswer (the request's one
// call, all or nothing): the batch is debited, so it must be spent or counted. With
// partitions 4, lateShardAnswer, the same.
func TestLateBatchIsHeld(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 0), 1, 1)
			url := srv.WebdisURL()
			calls := l.resetMidCall(t, 0, url, hdr("x-k", "A"), hdr("x-y", "late"))
			require.Equal(t, min(parts, 2), calls, "one call, or one per rule")
			require.Equal(t, tokens(990), yTokens(t, srv, "late"), "Redis debited y's batch of 10")
			y := l.vms[0].rules[1]
			require.Equal(t, "y", y.rule.Name)
			held := y.lease.held[yKey]
			require.NotNil(t, held, "the committed batch is this VM's lease")
			require.EqualValues(t, 10, held.units, "all of it: the reset request spent none")
			require.Equal(t, t0.UnixNano()+int64(time.Minute), held.expires, "ttl from the call's send")
			taken, err := l.host.GetCounterMetric(statName("ratelimit_lease_taken_total", "y"))
			require.NoError(t, err)
			require.EqualValues(t, 1, taken)

			for i := range 10 {
				l.now += int64(time.Millisecond)
				ok, _ := l.doRelayed(t, 0, url, hdr("x-k", fmt.Sprint("B", i)), hdr("x-y", "late"))
				require.True(t, ok)
				require.Equal(t, tokens(990), yTokens(t, srv, "late"), "request %d spends the held batch", i)
			}
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "C"), hdr("x-y", "late"))
			require.True(t, ok)
			require.Less(t, yTokens(t, srv, "late"), tokens(981), "the batch is spent: y takes another")
			dropped, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
			require.NoError(t, err)
			require.Zero(t, dropped)
		})
	}
}

// TestLateBatchUncommittedIsNotHeld: with partitions 1 a reset request's call in which x
// denies commits nothing (all or nothing), y's batch included: the VM holds no lease, and the
// key's next request asks Redis for y again.
func TestLateBatchUncommittedIsNotHeld(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	l := newGlobalFleet(t, leasedY(1, 1, 0), 1, 1)
	url := srv.WebdisURL()
	ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "A"), hdr("x-y", "first"))
	require.True(t, ok, "A's one request")
	l.resetMidCall(t, 0, url, hdr("x-k", "A"), hdr("x-y", "late"))
	require.EqualValues(t, -1, yTokens(t, srv, "late"), "x denied: Redis wrote nothing for y")
	y := l.vms[0].rules[1]
	require.Nil(t, y.lease.held[yKey], "no lease for a batch Redis did not commit")
	ok, _ = l.doRelayed(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
	require.True(t, ok)
	require.Equal(t, tokens(990), yTokens(t, srv, "late"), "y asks Redis for its first batch")
	taken, err := l.host.GetCounterMetric(statName("ratelimit_lease_taken_total", "y"))
	require.NoError(t, err)
	require.EqualValues(t, 2, taken, "first's batch and B's; none for the reset request")
	dropped, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
	require.NoError(t, err)
	require.Zero(t, dropped, "nothing was debited, so nothing is dropped")
}

// TestLateBatchOnOverflowIsDropped: a reset request's batch (as in TestLateBatchIsHeld) that
// lands on y's overflow key, y's key bound being reached, is decided there for the request's
// own cost alone (no lease on the overflow key) and gives the VM no lease; the reset request's
// unit, which nobody spent, is counted in lease_units_dropped, as the partitioned path counts
// it (TestPartitionedLateBatchOnOverflowIsDropped).
func TestLateBatchOnOverflowIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 4), 1, 1)
			url := srv.WebdisURL()
			// max_keys 4: one live key per partition with 4, four in all with 1; twenty keys
			// fill every partition.
			for i := range 20 {
				ok, _ := l.doRelayed(t, 0, url, hdr("x-k", fmt.Sprint("fill", i)), hdr("x-y", fmt.Sprint("fill", i)))
				require.True(t, ok)
			}
			counter := func(metric string) uint64 {
				n, _ := l.host.GetCounterMetric(statName(metric, "y"))
				return n
			}
			overflowed, before := counter("ratelimit_key_overflow_total"), counter("ratelimit_lease_units_dropped_total")
			require.Positive(t, overflowed, "the fills overflowed")

			l.resetMidCall(t, 0, url, hdr("x-k", "A"), hdr("x-y", "late"))
			require.Equal(t, overflowed, counter("ratelimit_key_overflow_total"), "a late answer is not counted as the rule's decision")
			require.EqualValues(t, 1, counter("ratelimit_lease_units_dropped_total")-before, "the overflow key debited the request's own unit only")
			require.Nil(t, l.vms[0].rules[1].lease.held[yKey], "no lease on an overflow key")
		})
	}
}

// TestLateBatchAfterTTLIsDropped: a reset request's call for y's lease batch (ttl 100 ms,
// redis.timeout 2 s) is answered only after the batch's ttl, counted from the call's send,
// has passed; meanwhile a later request took and holds a fresh batch on the same key. The
// late batch cannot be spent any more (a lease's units expire ttl after the call's send), so
// all ten units are counted as dropped at once, and the fresh lease is left alone: its nine
// units still admit the key's next requests with no call. Holding the expired batch instead
// would replace the live lease (dropping its nine units) with one that is already expired (its
// ten dropped at the next request), and the key's next request would take a third batch.
func TestLateBatchAfterTTLIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			l, url, y, dropped := newLateBatchFleet(t, srv, parts)

			id, calls := l.startReset(t, 0, hdr("x-k", "A"), hdr("x-y", "late"))
			l.now += int64(50 * time.Millisecond)
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
			require.True(t, ok)
			fresh := y.lease.held[yKey]
			require.NotNil(t, fresh)
			require.EqualValues(t, 9, fresh.units, "the later request's batch, its own unit spent")

			l.now += int64(60 * time.Millisecond) // 110 ms after the reset request's call
			for _, c := range calls {
				l.answerAt(t, url, c)
			}
			l.host.CompleteHttpContext(id)
			require.Same(t, fresh, y.lease.held[yKey], "the live lease is kept")
			require.EqualValues(t, 9, fresh.units)
			require.EqualValues(t, 10, dropped(), "the expired late batch is dropped, all of it, at once")

			requireNextSpendsLiveLease(t, l, srv, fresh)
			require.EqualValues(t, 10, dropped(), "nothing more is dropped")
		})
	}
}

// TestSlowBatchAfterTTLIsDropped is TestLateBatchAfterTTLIsDropped for a request that still
// waits: its call for y's batch is answered after the batch's ttl has passed, while a later
// request holds a fresh batch on the key. The request is admitted (it spends its own unit of
// the batch, which Redis committed), and the other nine units, already expired, are dropped at
// once; the live lease is kept and admits the key's next request with no call.
func TestSlowBatchAfterTTLIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			l, url, y, dropped := newLateBatchFleet(t, srv, parts)

			l.cur = 0
			id := l.host.InitializeHttpContext()
			action := l.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, hdr("x-k", "A"), hdr("x-y", "late")}, true)
			require.Equal(t, types.ActionPause, action)
			calls := l.host.GetCalloutAttributesFromContext(id)
			l.now += int64(50 * time.Millisecond)
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
			require.True(t, ok)
			fresh := y.lease.held[yKey]
			require.NotNil(t, fresh)
			require.EqualValues(t, 9, fresh.units)

			l.now += int64(60 * time.Millisecond) // 110 ms after the slow request's call
			for _, c := range calls {
				l.answerAt(t, url, c)
			}
			require.Equal(t, types.ActionContinue, l.host.GetCurrentHttpStreamAction(id), "the slow request is admitted")
			l.host.CompleteHttpContext(id)
			require.Same(t, fresh, y.lease.held[yKey], "the live lease is kept")
			require.EqualValues(t, 9, fresh.units)
			require.EqualValues(t, 9, dropped(), "the expired batch's nine other units are dropped at once")

			requireNextSpendsLiveLease(t, l, srv, fresh)
			require.EqualValues(t, 9, dropped(), "nothing more is dropped")
		})
	}
}

// lateBatchRules are the two global rules of the late-batch tests: x, which every request
// passes (continue), and y, whose key "late" takes lease batches of ten units that expire 100
// ms after their call is sent.
const lateBatchRules = `[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":1000,"window":"1h"},` +
	`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h","lease":{"batch":10,"ttl":"100ms"}}]`

// newLateBatchFleet starts one VM on lateBatchRules against srv with parts partitions, and
// returns it with webdis's URL, rule y and a reader of y's dropped-units counter.
func newLateBatchFleet(t *testing.T, srv *redistest.Server, parts int) (*leaseVMs, string, *ruleState, func() uint64) {
	t.Helper()
	loadScripts(srv)
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts}, lateBatchRules), 1, 1)
	y := l.vms[0].rules[1]
	require.Equal(t, "y", y.rule.Name)
	dropped := func() uint64 {
		n, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
		require.NoError(t, err)
		return n
	}
	return l, srv.WebdisURL(), y, dropped
}

// requireNextSpendsLiveLease checks the closing promise of the late-batch tests: after the
// late answer, the key's next request is admitted from the live lease fresh with no call to
// Redis (y's stored tokens do not move), and the lease has one unit less.
func requireNextSpendsLiveLease(t *testing.T, l *leaseVMs, srv *redistest.Server, fresh *heldLease) {
	t.Helper()
	before := yTokens(t, srv, "late")
	units := fresh.units
	l.now += int64(time.Millisecond)
	ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "C"), hdr("x-y", "late"))
	require.True(t, ok)
	require.Equal(t, before, yTokens(t, srv, "late"), "the next request spends the live lease")
	require.EqualValues(t, units-1, fresh.units)
}

// TestLeaseMapFullDecidesExactly: when a VM's lease map for y is full of unexpired leases (a
// flood of distinct keys, which a client controls when the key is a header), a key the map
// does not hold is decided exactly, as maxHeld promises: its request debits its own cost in
// Redis, not a batch the VM could not hold. Otherwise every request of every key not held
// would debit a whole batch (ten units) and spend one, and a flood of keys would make the
// other clients' keys run out ten times faster than their traffic.
func TestLeaseMapFullDecidesExactly(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 0), 1, 1)
			y := fillHeld(l)
			for i := range 3 {
				ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", fmt.Sprint("A", i)), hdr("x-y", "late"))
				require.True(t, ok)
				require.Equal(t, tokens(999-int64(i)), yTokens(t, srv, "late"), "request %d debits its own unit only", i)
			}
			require.Len(t, y.held, maxHeld, "the map stays bounded")
		})
	}
}

// TestLateBatchMapFullIsDropped: a reset request's batch is committed when the VM's lease map
// for y has filled up meanwhile; it cannot be held, so all ten units are counted as dropped
// (they were debited), and the map stays bounded.
func TestLateBatchMapFullIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 0), 1, 1)
			id, calls := l.startReset(t, 0, hdr("x-k", "A"), hdr("x-y", "late"))
			y := fillHeld(l)
			for _, c := range calls {
				l.answerAt(t, srv.WebdisURL(), c)
			}
			l.host.CompleteHttpContext(id)
			require.Equal(t, tokens(990), yTokens(t, srv, "late"), "Redis committed the batch")
			require.Len(t, y.held, maxHeld, "the map stays bounded")
			dropped, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
			require.NoError(t, err)
			require.EqualValues(t, 10, dropped, "the batch no lease can hold is dropped, all of it")
		})
	}
}

// TestResetGivesLeaseUnitsBack: y's lease admits a request, which then waits for Redis on x;
// the client resets the stream before the answer. The request never reached the upstream, so
// the unit y's lease gave it goes back to the lease, as when another rule denies the request
// (refundLeases): it is still debited and within the lease's ttl. Otherwise it would be
// neither spent by an admitted request nor counted as dropped.
func TestResetGivesLeaseUnitsBack(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 0), 1, 1)
			url := srv.WebdisURL()
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "A"), hdr("x-y", "late"))
			require.True(t, ok)
			held := l.vms[0].rules[1].lease.held[yKey]
			require.NotNil(t, held)
			require.EqualValues(t, 9, held.units)

			n := l.resetMidCall(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
			require.Equal(t, 1, n, "x's call only: y's lease admitted the request")
			require.Same(t, held, l.vms[0].rules[1].lease.held[yKey])
			require.EqualValues(t, 9, held.units, "the reset request's unit is back in y's lease")
		})
	}
}

// Units refunded by requests that spent from a lease later replaced are lost, never added to
// the new lease: one holder then never serves more than batch - cost requests from one take.
func TestLeaseRefundNeverInflatesANewerLease(t *testing.T) {
	cfg := `{"redis":{"cluster":"webdis","timeout":"40ms","failure_mode":"allow"},"rules":[
	{"name":"L","continue":true,"key":[{"source":"header","name":"x-api-key"}],"algorithm":"token_bucket","limit":100000,"window":"1h","lease":{"batch":10,"ttl":"10s"}},
	{"name":"G","scope":"global","key":[{"source":"header","name":"x-api-key"}],"algorithm":"gcra","limit":5,"window":"1m"}]}`
	d := newNative(t, cfg)
	allow := `{"EVALSHA":[1764504000,0,1,%s,1,5,4,0,12000000000,0]}`
	deny := `{"EVALSHA":[1764504000,0,0,%s,0,5,0,2500000000,60000000000,0]}`
	r1, c1 := d.startGlobal(t, "a")
	d.answerScript(r1, c1, allow) // takes 10, holds 9
	var pending [][2]uint32
	for range 9 { // the 9 held units are spent by requests that wait for Redis
		r, c := d.startGlobal(t, "a")
		pending = append(pending, [2]uint32{r, c})
	}
	r11, c11 := d.startGlobal(t, "a")
	d.answerScript(r11, c11, allow) // a new take: holds 9
	for _, rc := range pending {
		d.answerScript(rc[0], rc[1], deny) // the global rule denies: refunds
	}
	taken0, _ := d.host.GetCounterMetric("ratelimit_lease_taken_total;rule=L")
	spent := 0
	for range 40 {
		r, c := d.startGlobal(t, "a")
		d.answerScript(r, c, allow)
		if tk, _ := d.host.GetCounterMetric("ratelimit_lease_taken_total;rule=L"); tk != taken0 {
			break
		}
		spent++
	}
	require.LessOrEqual(t, spent, 9, "one take served more requests than batch - cost")
}

// overflowLeaseDriver runs requests on worker VM 0 of a global fleet, relayed to webdis at
// url (filtertest.OverflowLeaseDriver).
type overflowLeaseDriver struct {
	*leaseVMs
	url string
}

// AdmitY sends a request with x-y: v.
func (l overflowLeaseDriver) AdmitY(t *testing.T, v string) bool {
	ok, _ := l.doRelayed(t, 0, l.url, hdr("x-y", v))
	return ok
}

// Metric reads a counter of the filter; one never touched reads 0.
func (l overflowLeaseDriver) Metric(_ *testing.T, name string) int64 {
	n, _ := l.host.GetCounterMetric(name)
	return int64(n)
}

// TestGlobalLeaseNeverOnOverflowKey checks natively that a lease is never taken on a global
// rule's overflow key (filtertest.OverflowLeaseCase.CheckNeverOnOverflowKey), and that the VM
// holds no units for a client decided there; wasmhost/moduletest runs the same
// cases against the compiled module.
func TestGlobalLeaseNeverOnOverflowKey(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range filtertest.OverflowLeaseCases {
		t.Run(c.Name(), func(t *testing.T) {
			c.CheckNeverOnOverflowKey(t, func(t *testing.T, config string) filtertest.OverflowLeaseDriver {
				srv.MustDo("FLUSHALL")
				loadScripts(srv)
				l := newGlobalFleet(t, config, 1, 1)
				// Checked when the run ends, before its emulator stops.
				t.Cleanup(func() {
					if y := l.vms[0].rules[0].lease; y != nil {
						for k, h := range y.held {
							if strings.Contains(k, "new") {
								require.Zero(t, h.units, "no units held for %q, decided on the overflow key", k)
							}
						}
					}
				})
				return overflowLeaseDriver{l, srv.WebdisURL()}
			})
		})
	}
}

// A denial decided on the overflow key is not the key's own: the over-limit cache does not
// keep it. Once the key table has room again the client gets a key of its own, and the exact
// decision (a callout) admits it, where a cached overflow denial would deny it on the proxy for
// the overflow key's whole wait. wasmhost/moduletest runs the same sequence
// against the compiled module on Redis's real clock.
func TestOverLimitCacheKeepsNoOverflowDenial(t *testing.T) {
	srv := redistest.Start(t)
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, filtertest.OverflowCacheRules), 1, 1)
	start := l.now
	at := func(d time.Duration) { l.now = start + int64(d) }
	for range filtertest.ARequests {
		ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "a"))
		require.True(t, ok, "a takes the rule's one key")
	}
	at(filtertest.OverflowAt)
	denied := false
	for range 4 {
		if ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "b")); !ok {
			denied = true
			break
		}
	}
	require.True(t, denied, "the overflow key must deny b")
	at(filtertest.FreedAt)
	ok, calls := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "b"))
	require.True(t, ok, "a's key has expired: b gets a key of its own and is admitted (%d callouts)", calls)
	require.Positive(t, calls)
}

// globalLeaseAlgorithms are the ones the global tests run: a bucket and a window. The filter's
// lease code is the same for every algorithm; what differs, the script's give-back for each,
// is held to the Go algorithms by the differential test in sharedstate/redis.
var globalLeaseAlgorithms = []string{"token_bucket", "fixed_window"}

// relayedLeaseDriver runs requests on the worker VMs of a global fleet, each relayed to
// webdis at url, on the fleet's fake clock (filtertest.LeaseDriver).
type relayedLeaseDriver struct {
	*leaseVMs
	url string
}

// Advance moves the fake clock by d.
func (l relayedLeaseDriver) Advance(d time.Duration) { l.now += int64(d) }

// Admit sends a request on worker VM w and relays its callouts.
func (l relayedLeaseDriver) Admit(t *testing.T, w int) bool {
	ok, _ := l.doRelayed(t, w, l.url)
	return ok
}

// checkGlobalLeaseAdmits is checkLeaseAdmits for a global rule on srv, on one proxy of
// tr.Workers worker VMs. The exact run does not depend on the batch, so it runs once for each
// traffic pattern and serves every batch.
func checkGlobalLeaseAdmits(srv *redistest.Server) func(*testing.T, filtertest.LeaseTraffic) {
	exact := map[filtertest.LeaseTraffic]int{}
	run := func(t *testing.T, tr filtertest.LeaseTraffic, name string, leased bool) (admitted int) {
		t.Run(name, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			loadScripts(srv)
			rules := `[{"name":"hot","scope":"global",` + tr.RuleFields(leased) + `}]`
			l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, rules), 1, tr.Workers)
			admitted = tr.Admitted(t, relayedLeaseDriver{l, srv.WebdisURL()})
		})
		return admitted
	}
	return func(t *testing.T, tr filtertest.LeaseTraffic) {
		n, ok := exact[tr.Exact()]
		if !ok {
			n = run(t, tr, "exact", false)
			exact[tr.Exact()] = n
		}
		tr.CheckLeaseAdmits(t, n, run(t, tr, "leased", true))
	}
}

// TestGlobalLeaseAdmitsPacedTraffic is TestLeaseAdmitsPacedTraffic for global rules.
func TestGlobalLeaseAdmitsPacedTraffic(t *testing.T) {
	srv := redistest.Start(t)
	check := checkGlobalLeaseAdmits(srv)
	for _, tr := range filtertest.PacedLeaseTraffic(globalLeaseAlgorithms) {
		t.Run(tr.Name(), func(t *testing.T) { check(t, tr) })
	}
}

// TestGlobalLeaseAdmitsTrafficInTurn is TestLeaseAdmitsTrafficInTurn for global rules.
func TestGlobalLeaseAdmitsTrafficInTurn(t *testing.T) {
	srv := redistest.Start(t)
	check := checkGlobalLeaseAdmits(srv)
	for _, tr := range filtertest.LeaseTrafficInTurn(globalLeaseAlgorithms) {
		t.Run(tr.Name(), func(t *testing.T) { check(t, tr) })
	}
}
