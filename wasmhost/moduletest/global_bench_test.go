package moduletest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// BenchmarkGlobalWasm measures what a global rule adds to a request over the same rule kept
// local: one HTTP callout to webdis and one script in Redis, through the wazero host, one worker
// VM, one hot key below its limit. Each case reports the request's latency (p50-us, p99-us: the
// whole request through the host, the round trip included), the median request's guest time
// (guest-p50-ns/op: time inside calls into the VM, the host functions it calls included; the
// mean, guest-ns/op, takes in every preemption and collection), host calls and callouts per
// request:
//
//   - "no-rule": the filter with no rule that applies, the request alone;
//   - "local": the global rule kept local;
//   - "raw-evalsha": the filter's EVALSHA for the global rule sent through webdis by net/http's
//     transport as the host sends its callouts, no proxy: the round trip a global decision
//     costs at the least;
//   - "callout-floor": wasmhost/testdata/hostfloor configured with {"global":true}, which makes
//     the global request's host calls (the callout with the filter's EVALSHA body included)
//     and computes nothing: its guest time is what the host calls cost, the host's callout
//     plumbing included, and its latency is the host's plumbing and the round trip;
//   - "global", "global-3-rules" and "global-leased" (a lease block: one callout per batch of
//     100).
//
// "side-by-side" sends one request of no-rule, local, raw-evalsha, callout-floor and global in
// turn, b.N times, so that the load of a shared machine weighs on all five alike. Each case is
// a module of its own there: the host compiles identical bytes once, and a case that runs the
// code the case before it has just run (local after no-rule) runs it warm, a measured factor
// of up to two in guest time, which no other case gets. It reports these ratios:
// global-added-p50-us (global's p50 less no-rule's) over
// raw-evalsha's p50 (x-raw-evalsha; floor-x-raw-evalsha for the callout floor), and global's
// guest p50 over local's (x-local-guest), with the filter's own part of it, global's guest p50
// less the callout floor's (own-guest-p50-ns, own-x-local-guest).
//
// With RATELIMIT_GLOBAL_BASELINE naming another build of the module (a .wasm file, such as the
// main branch's), side-by-side also sends each round one request through that build configured
// as "global", just after this tree's global request in one round and just before it in the
// next, and reports this tree's guest p50 and added p50 over the baseline's (x-baseline-guest,
// x-baseline-added).
//
//	go test ./wasmhost/moduletest/ -run '^$' -bench GlobalWasm -benchtime 2000x
func BenchmarkGlobalWasm(b *testing.B) {
	srv := redistest.Start(b)
	rules := func(scope string, n int, lease string) string {
		var rs []string
		for i := range n {
			// continue: true on all but the last, so every rule applies to the request.
			rs = append(rs, fmt.Sprintf(`{"name":"bench%d","key":[{"source":"header","name":"x-user"}],
				"algorithm":"token_bucket","limit":1000000000,"window":"1h","scope":%q,"continue":%v%s}`,
				i, scope, i < n-1, lease))
		}
		if n == 0 {
			// The filter with a rule that never matches: the cost of the request alone.
			rs = append(rs, `{"name":"never","match":{"path":{"exact":"/never"}},"algorithm":"token_bucket","limit":1,"window":"1h"}`)
		}
		return globalConfig(redisOpts{FailureMode: "deny"}, "["+strings.Join(rs, ",")+"]")
	}
	type benchCase struct{ name, module, config string }
	noRule, local := benchCase{"no-rule", ".", rules("", 0, "")}, benchCase{"local", ".", rules("local", 1, "")}
	floor, global := benchCase{"callout-floor", "./wasmhost/testdata/hostfloor", `{"global":true}`}, benchCase{"global", ".", rules("global", 1, "")}
	for _, bc := range []benchCase{noRule, local, {"raw-evalsha", "", ""}, floor, global,
		{"global-3-rules", ".", rules("global", 3, "")}, {"global-leased", ".", rules("global", 1, `,"lease":{"batch":100}`)}} {
		b.Run(bc.name, func(b *testing.B) {
			var s benchSamples
			if bc.module == "" {
				raw := newRawEvalSHA(b, srv)
				for range b.N {
					s.add(raw.call(), 0)
				}
				b.ReportMetric(1, "callouts/op")
				s.report(b, "")
				return
			}
			h := newGlobalBenchHost(b, bc.module, bc.config, srv.WebdisURL())
			start := h.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				s.add(timedRequest(b, h))
			}
			b.StopTimer()
			end := h.Stats()
			s.report(b, "")
			b.ReportMetric(float64(end.GuestTime-start.GuestTime)/float64(b.N), "guest-ns/op")
			b.ReportMetric(float64(sumCalls(end.HostCalls)-sumCalls(start.HostCalls))/float64(b.N), "host-calls/op")
			b.ReportMetric(float64(end.HostCalls["env.proxy_http_call"]-start.HostCalls["env.proxy_http_call"])/float64(b.N), "callouts/op")
			for _, m := range redisErrorMetrics {
				if v := redisMetric(h, m); v != 0 {
					b.Fatalf("%s = %d", m, v)
				}
			}
		})
	}
	b.Run("side-by-side", func(b *testing.B) {
		hosts := make([]*wasmhost.Host, 4)
		for i, bc := range []benchCase{noRule, local, floor, global} {
			hosts[i] = newTaggedBenchHost(b, wasmtest.BuildGuest(b, bc.module), bc.name, bc.config, srv.WebdisURL())
		}
		var baseline *wasmhost.Host
		if file := os.Getenv("RATELIMIT_GLOBAL_BASELINE"); file != "" {
			wasm, err := os.ReadFile(file)
			require.NoError(b, err)
			baseline = newTaggedBenchHost(b, wasm, "baseline", global.config, srv.WebdisURL())
		}
		raw := newRawEvalSHA(b, srv)
		var none, loc, flo, glo, rs, base benchSamples
		b.ResetTimer()
		for i := range b.N {
			none.add(timedRequest(b, hosts[0]))
			loc.add(timedRequest(b, hosts[1]))
			rs.add(raw.call(), 0)
			flo.add(timedRequest(b, hosts[2]))
			switch {
			case baseline == nil:
				glo.add(timedRequest(b, hosts[3]))
			case i%2 == 0:
				glo.add(timedRequest(b, hosts[3]))
				base.add(timedRequest(b, baseline))
			default:
				base.add(timedRequest(b, baseline))
				glo.add(timedRequest(b, hosts[3]))
			}
		}
		b.StopTimer()
		rawP50, noneP50 := rs.report(b, "raw-evalsha-"), none.report(b, "no-rule-")
		loc.report(b, "local-")
		flo.report(b, "floor-")
		glo.report(b, "global-")
		added := glo.p50() - noneP50
		b.ReportMetric(float64(added.Nanoseconds())/1000, "global-added-p50-us")
		b.ReportMetric(float64(added)/float64(rawP50), "x-raw-evalsha")
		b.ReportMetric(float64(flo.p50()-noneP50)/float64(rawP50), "floor-x-raw-evalsha")
		b.ReportMetric(float64(glo.guestP50())/float64(loc.guestP50()), "x-local-guest")
		if baseline != nil {
			base.report(b, "baseline-")
			b.ReportMetric(float64(glo.guestP50())/float64(base.guestP50()), "x-baseline-guest")
			b.ReportMetric(float64(added)/float64(base.p50()-noneP50), "x-baseline-added")
		}
		own := glo.guestP50() - flo.guestP50()
		b.ReportMetric(float64(own), "own-guest-p50-ns")
		b.ReportMetric(float64(own)/float64(loc.guestP50()), "own-x-local-guest")
	})
}

// benchSamples are the latencies and guest times of a benchmark's requests.
type benchSamples struct{ lat, guest []time.Duration }

func (s *benchSamples) add(lat, guest time.Duration) {
	s.lat, s.guest = append(s.lat, lat), append(s.guest, guest)
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func (s *benchSamples) p50() time.Duration      { return median(s.lat) }
func (s *benchSamples) guestP50() time.Duration { return median(s.guest) }

// report reports the median and the 99th percentile of the latencies in microseconds and,
// for requests through the host, the median guest time, each metric's name prefixed with
// prefix; it returns the median latency.
func (s *benchSamples) report(b *testing.B, prefix string) time.Duration {
	p50 := s.p50()
	b.ReportMetric(float64(p50.Nanoseconds())/1000, prefix+"p50-us")
	b.ReportMetric(float64(s.lat[len(s.lat)*99/100].Nanoseconds())/1000, prefix+"p99-us")
	if g := s.guestP50(); g > 0 {
		b.ReportMetric(float64(g), prefix+"guest-p50-ns/op")
	}
	return p50
}

// newGlobalBenchHost starts one worker VM of module configured with config, its "webdis"
// cluster at webdisURL, and warms it up: the script is loaded into Redis and the connection
// pool holds a connection.
func newGlobalBenchHost(b *testing.B, module, config, webdisURL string) *wasmhost.Host {
	return startBenchHost(b, wasmtest.BuildGuest(b, module), config, webdisURL)
}

// newTaggedBenchHost is newGlobalBenchHost for the module wasm with a custom section named
// tag appended, which makes it a module of its own: the host compiles it apart from every
// other module, identical bytes included, so that no other case runs its code.
func newTaggedBenchHost(b *testing.B, wasm []byte, tag, config, webdisURL string) *wasmhost.Host {
	// A custom section (id 0): its size, its name, and a byte of content (wazero does not
	// read a custom section without content).
	section := append(append([]byte{byte(len(tag))}, tag...), 0)
	return startBenchHost(b, append(append(slices.Clip(wasm), 0, byte(len(section))), section...), config, webdisURL)
}

// startBenchHost is newGlobalBenchHost for the module wasm.
func startBenchHost(b *testing.B, wasm []byte, config, webdisURL string) *wasmhost.Host {
	h, err := wasmhost.New(context.Background(), wasm, wasmhost.Options{
		Workers: 1, VMID: "bench", PluginConfig: []byte(config), SharedData: wasmhost.NewSharedData(),
		Clusters: map[string]string{"webdis": webdisURL},
	})
	require.NoError(b, err)
	b.Cleanup(func() { _ = h.Close(context.Background()) })
	for range 10 {
		timedRequest(b, h)
	}
	return h
}

// timedRequest sends BenchmarkGlobalWasm's request (one hot key) through h, which must let it
// through, and returns its latency and the guest time it took.
func timedRequest(b *testing.B, h *wasmhost.Host) (lat, guest time.Duration) {
	g0, t0 := h.GuestTime(), time.Now()
	res, err := h.Do(context.Background(), globalRequest(hdr("x-user", "bench")))
	lat = time.Since(t0)
	if err != nil || res.Local != nil {
		b.Fatalf("request failed: %v %+v", err, res.Local)
	}
	return lat, h.GuestTime() - g0
}

// rawEvalSHA sends one EVALSHA through webdis over loopback HTTP, as the host's callouts reach
// it, with no proxy in between: the call the filter sends for BenchmarkGlobalWasm's global rule
// (a token bucket of 10^9 per hour with the default max_keys, so that the script also keeps
// the rule's key set), on a key of its own. It goes through net/http as a callout does: a
// request with a deadline handed to a keep-alive transport's RoundTrip, the answer's body read
// to its end.
type rawEvalSHA struct {
	b    *testing.B
	url  string
	tr   *http.Transport
	body []byte
}

func newRawEvalSHA(b *testing.B, srv *redistest.Server) *rawEvalSHA {
	rule, err := redis.NewRule(algorithms.Config{Algorithm: "token_bucket", Limit: 1_000_000_000, Window: time.Hour})
	require.NoError(b, err)
	rule = rule.Partitioned(1, 10000, "rl", "rl", "raw")
	items := []redis.Item{{Rule: rule, Key: redis.AppendKey(nil, "rl", "rl", "raw", []byte("5:bench")), N: 1}}
	tr := &http.Transport{MaxIdleConnsPerHost: 2, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	r := &rawEvalSHA{b: b, url: strings.TrimSuffix(srv.WebdisURL(), "/") + redis.Path,
		tr: tr, body: redis.AppendEvalSHA(nil, 0, items)}
	r.post(redis.AppendEval(nil, 0, items)) // load the script
	for range 10 {
		r.call()
	}
	return r
}

// call sends the EVALSHA and returns its round trip.
func (r *rawEvalSHA) call() time.Duration {
	t0 := time.Now()
	r.post(r.body)
	return time.Since(t0)
}

func (r *rawEvalSHA) post(body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		r.b.Fatal(err)
	}
	req.Header.Set("Content-Type", redis.ContentType)
	resp, err := r.tr.RoundTrip(req)
	if err != nil {
		r.b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		r.b.Fatalf("webdis answered %d", resp.StatusCode)
	}
}
