package moduletest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// The guest's cost per request, measured in the same run for a filter that does nothing, for
// the rate limiter with one matching rule, and with five. The five rules share one key, as
// rules counting one client over several windows do; "5rules-distinct" gives each its own.
// "1rule-new-client" sends every request from another address, so that no key is seen twice
// (every key digest is computed, every slot is new), on a table of twice as many keys as the
// case sends, so that every new client finds a free slot; "1rule-new-client-full" does so on
// a rule with max_keys 1000 whose table is full of idle keys after the warm-up (every new key
// takes another's slot). "hostfloor-new-client" is the host-call floor of a new client
// (wasmhost/testdata/hostfloor configured with {"per_client":true} and the same max_keys): the
// difference between it and "1rule-new-client" is the filter's own computation for a new
// client. shared-reads/op and shared-writes/op count the shared-data calls.
//
// A new-client case runs beside two baselines of its module: the same client on every request
// (the host floor's or 1 rule's default request, its slot always hot in the CPU's caches), and
// returning clients (the case's max_keys, sent by returningClients: a population placed once
// each during the warm-up, then coming back in a fixed shuffled order, each request from a
// client seen before but not recently). The cases are wasmtest.PerRequestCases, which the V8
// benchmark runs too. The three hosts, each with shared data of its own, take turns by blocks
// of requests so that all meet the same load, and the case reports its median request over
// each baseline's (x-same-client, x-returning-clients) and the baselines' own figures under
// their names: run one after the other, either can run 1.7x slower or more than the other when
// other processes share the cores. Its ns/op counts every host's requests. Run with a fixed
// count:
//
//	go test ./wasmhost/moduletest/ -run '^$' -bench GuestPerRequest -benchtime 5000x
func BenchmarkGuestPerRequest(b *testing.B) {
	for _, c := range wasmtest.PerRequestCases() {
		b.Run(c.Name, func(b *testing.B) {
			maxKeys := c.MaxKeys
			if maxKeys == 0 {
				maxKeys = min(2*(benchWarmup+b.N), 1_000_000)
			}
			config := c.Config
			if strings.Contains(config, "%d") {
				config = fmt.Sprintf(config, maxKeys)
			}
			g := newGuestRun(b, c.Module, config, benchRequest(), 0)
			runs := []*guestRun{g}
			if c.SameClient != "" {
				g.next = newClients(benchWarmup + b.N)
				same := newGuestRun(b, c.Module, c.SameClient, benchRequest(), 0)
				back := newGuestRun(b, c.Module, fmt.Sprintf(c.Clients, maxKeys), benchRequest(), 0)
				back.next = returningClients(returningPopulation(maxKeys), benchWarmup+b.N)
				runs = append(runs, same, back)
			}
			benchGuests(b, runs...)
			p50 := g.report(b, "")
			if len(runs) > 1 {
				b.ReportMetric(float64(p50)/float64(runs[1].report(b, "same-client-")), "x-same-client")
				b.ReportMetric(float64(p50)/float64(runs[2].report(b, "returning-clients-")), "x-returning-clients")
			}
		})
	}
}

// newClients returns a request changer that sends each of n requests from another address,
// 10.a.b.c, the addresses made before the requests are sent; a request beyond n panics rather
// than come from a client seen before.
func newClients(n int) func(int, *wasmhost.Request) {
	sources := make([]string, n)
	for i := range sources {
		sources[i] = clientAddress(i)
	}
	return func(i int, req *wasmhost.Request) { req.SourceAddress = sources[i] }
}

// returningClients returns a request changer for n requests from a population of clients:
// the first population requests each from another client (placing it in the table), every
// later one from a client of the population in a fixed shuffled order, each client coming
// back once in every population requests.
func returningClients(population, n int) func(int, *wasmhost.Request) {
	order := rand.New(rand.NewPCG(1, 2)).Perm(population)
	sources := make([]string, n)
	for i := range sources {
		if i < population {
			sources[i] = clientAddress(i)
		} else {
			sources[i] = clientAddress(order[(i-population)%population])
		}
	}
	return func(i int, req *wasmhost.Request) { req.SourceAddress = sources[i] }
}

// returningPopulation is the number of returning clients on a table of maxKeys keys: as many
// as the warm-up sends, so that each is placed once before the measured requests, and at most
// nine tenths of maxKeys, so that the table holds every one of them without evicting another.
func returningPopulation(maxKeys int) int { return min(benchWarmup, maxKeys*9/10) }

// clientAddress is the source address of the benchmarks' client i, 10.a.b.c.
func clientAddress(i int) string {
	return fmt.Sprintf("10.%d.%d.%d:5555", i>>16&255, i>>8&255, i&255)
}

// benchWarmup is the number of requests each host of a benchmark serves before it is
// measured; benchBlock is how many it serves before another host's turn.
const benchWarmup, benchBlock = 2000, 100

// guestRun is a benchmark's host: one worker VM of a module serving req, changed before each
// request by next when set, every request let through (status 0) or answered locally with
// status. each collects the measured requests' guest times, from the host's stats at start.
type guestRun struct {
	h      *wasmhost.Host
	req    wasmhost.Request
	next   func(int, *wasmhost.Request)
	status int
	sent   int
	start  wasmhost.Stats
	each   []time.Duration
}

func newGuestRun(b *testing.B, module, config string, req wasmhost.Request, status int) *guestRun {
	h, err := wasmhost.New(context.Background(), wasmtest.BuildGuest(b, module), wasmhost.Options{
		Workers: 1, VMID: "bench", PluginConfig: []byte(config), SharedData: wasmhost.NewSharedData(),
	})
	require.NoError(b, err)
	b.Cleanup(func() { h.Close(context.Background()) })
	return &guestRun{h: h, req: req, status: status}
}

// serve serves n requests, recording each one's guest time when record is set.
func (g *guestRun) serve(b *testing.B, n int, record bool) {
	ctx := context.Background()
	last := g.h.GuestTime()
	for range n {
		if g.next != nil {
			g.next(g.sent, &g.req)
		}
		g.sent++
		res, err := g.h.Do(ctx, g.req)
		if err != nil || (res.Local == nil) != (g.status == 0) || res.Local != nil && res.Local.Status != g.status {
			b.Fatal(err, res.Local)
		}
		now := g.h.GuestTime()
		if record {
			g.each = append(g.each, now-last)
		}
		last = now
	}
}

// benchGuests serves benchWarmup requests on each of runs, then b.N measured requests on
// each, the runs taking turns by blocks of benchBlock requests so that all meet the same load.
func benchGuests(b *testing.B, runs ...*guestRun) {
	for _, g := range runs {
		g.serve(b, benchWarmup, false)
		g.start, g.each = g.h.Stats(), make([]time.Duration, 0, b.N)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += benchBlock {
		for _, g := range runs {
			g.serve(b, min(benchBlock, b.N-sent), true)
		}
	}
	b.StopTimer()
}

// p50 returns the median of the measured requests' guest times: on a shared machine a mean
// takes in every preemption of the benchmark's thread, while the median request ran
// undisturbed, so guest-p50-ns/op compares builds of the module with far less noise.
func (g *guestRun) p50() time.Duration {
	slices.Sort(g.each)
	return g.each[len(g.each)/2]
}

// report reports the run's guest cost per measured request, each unit's name after prefix,
// and returns its median.
func (g *guestRun) report(b *testing.B, prefix string) time.Duration {
	end, n := g.h.Stats(), float64(len(g.each))
	p50 := g.p50()
	b.ReportMetric(float64(p50), prefix+"guest-p50-ns/op")
	b.ReportMetric(float64(end.GuestTime-g.start.GuestTime)/n, prefix+"guest-ns/op")
	b.ReportMetric(float64(sumCalls(end.HostCalls)-sumCalls(g.start.HostCalls))/n, prefix+"host-calls/op")
	b.ReportMetric(float64(end.HostCalls["env.proxy_get_shared_data"]-g.start.HostCalls["env.proxy_get_shared_data"])/n, prefix+"shared-reads/op")
	b.ReportMetric(float64(end.HostCalls["env.proxy_set_shared_data"]-g.start.HostCalls["env.proxy_set_shared_data"])/n, prefix+"shared-writes/op")
	b.ReportMetric(float64(end.AllocatorCalls-g.start.AllocatorCalls)/n, prefix+"allocator-calls/op")
	return p50
}

// BenchmarkGuestPerRequestKeyLength measures what the length of a key costs: the same rules
// keyed on a header whose value is 16 bytes and then 60 KiB (Envoy's default limit on a
// request's headers), with one rule and with five (each its own key: a constant part and the
// header). "60KiB" is refused with 431 (longer than the default max_key_bytes); "60KiB-decided"
// raises max_key_bytes to 65536 so that the long key is decided, as every key was without the
// bound. The long key's cases report their median guest time over the short key's, measured
// in the same run (x-16B).
//
//	go test ./wasmhost/moduletest/ -run '^$' -bench GuestPerRequestKeyLength -benchtime 5000x
func BenchmarkGuestPerRequestKeyLength(b *testing.B) {
	rule := func(i int) string {
		return fmt.Sprintf(`{"name":"r%d","continue":true,"key":[{"source":"const","value":"%d"},{"source":"header","name":"x-key"}],
			"algorithm":"token_bucket","limit":1000000000,"window":"1s"}`, i, i)
	}
	five := make([]string, 5)
	for i := range five {
		five[i] = rule(i)
	}
	for _, rules := range []struct {
		name, rules string
	}{{"1rule", rule(0)}, {"5rules", strings.Join(five, ",")}} {
		var short time.Duration
		for _, length := range []struct {
			name, options string
			bytes, status int
		}{{"16B", "", 16, 0}, {"60KiB", "", 60 << 10, 431}, {"60KiB-decided", `"max_key_bytes":65536,`, 60 << 10, 0}} {
			b.Run(rules.name+"/"+length.name, func(b *testing.B) {
				req := benchRequest()
				req.Headers = [][2]string{{"x-key", strings.Repeat("k", length.bytes)}}
				g := newGuestRun(b, ".", `{`+length.options+`"rules":[`+rules.rules+`]}`, req, length.status)
				benchGuests(b, g)
				p50 := g.report(b, "")
				if length.bytes == 16 {
					short = p50
				} else if short > 0 {
					b.ReportMetric(float64(p50)/float64(short), "x-16B")
				}
			})
		}
	}
}
