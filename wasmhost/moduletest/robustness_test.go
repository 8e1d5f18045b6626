package moduletest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// Exactness under concurrency: 4 worker VMs take concurrent requests on one hot key of a token
// bucket of N. Exactly N are admitted: none lost to a compare-and-swap race, none extra.
func TestExactUnderConcurrencyWasm(t *testing.T) {
	t.Parallel()
	const n, requests = 100, 300
	d := newWasm(t, fmt.Sprintf(`{"cas_attempts":64,"rules":[{"name":"hot","algorithm":"token_bucket","limit":%d,"window":"1h"}]}`, n),
		wasmOptions{workers: 4})
	var wg sync.WaitGroup
	var mu sync.Mutex
	status := map[int]int{}
	for range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := d.host.Do(ctx, d.request(step{}))
			if !assertNoErr(t, err) {
				return
			}
			o := outcomeOf(res)
			mu.Lock()
			status[o.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, map[int]int{0: n, 429: requests - n}, status)
	allowed, _ := d.host.Metric("ratelimit_requests_total;rule=hot;decision=allowed")
	denied, _ := d.host.Metric("ratelimit_requests_total;rule=hot;decision=denied")
	storeErrors, _ := d.host.Metric("ratelimit_store_errors_total;rule=hot")
	retries, _ := d.host.Metric("ratelimit_cas_retries_total;rule=hot")
	require.EqualValues(t, n, allowed)
	require.EqualValues(t, requests-n, denied)
	require.Zero(t, storeErrors)
	t.Logf("compare-and-swap retries across 4 workers: %d", retries)
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// Bad input never crashes the VM: every hostile request gets an ordinary decision.
func TestBadInputWasm(t *testing.T) {
	t.Parallel()
	d := newWasm(t, `{"trusted_hops":2,"rules":[{"name":"keyed","key":[{"source":"client_ip"},
		{"source":"header","name":"x-tenant","default":"none"},{"source":"query","name":"k","default":""}],
		"algorithm":"sliding_window","variant":"log","limit":3,"window":"1m",
		"cost":{"header":"x-cost","max":2}}]}`, wasmOptions{})
	huge := strings.Repeat("A", 64<<10)
	hostile := []step{
		{Headers: [][2]string{hdr("x-tenant", huge)}},
		{Headers: [][2]string{hdr("x-tenant", "ünïcödé ✓ \u202e")}},
		{Headers: [][2]string{hdr("x-tenant", "\xff\xfe\xfd invalid utf-8")}},
		{Headers: [][2]string{hdr("x-forwarded-for", "not-an-ip, ::::, 999.1.1.1")}},
		{Headers: [][2]string{hdr("x-forwarded-for", strings.Repeat("1.2.3.4,", 5000))}},
		{Headers: [][2]string{hdr("x-forwarded-for", "[::1]:80, 10.0.0.1:9")}},
		{Headers: [][2]string{hdr("x-cost", "99999999999999999999999")}},
		{Headers: [][2]string{hdr("x-cost", "-1"), hdr("x-cost", "1")}},
		{Path: "/?k=%zz&k=%00&k=" + huge[:4000]},
		{Path: "/" + huge},
		{Source: "garbage"},
		{Source: ""},
		{Method: strings.Repeat("X", 1000)},
	}
	for i, s := range hostile {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := d.host.Do(ctx, d.request(s))
		cancel()
		require.NoError(t, err, "request %d", i)
		o := outcomeOf(res)
		// 400: the repeated key parameter k is ambiguous (on_duplicate "reject"); 431: the
		// key is longer than max_key_bytes.
		require.Contains(t, []int{0, 400, 429, 431}, o.Status, "request %d: %+v", i, o)
	}
	require.Zero(t, d.host.Stats().Traps)
	require.Empty(t, errorLogs(d.host))
}

// Corrupt bytes planted in every slot of a rule are read as fresh keys: no panic, no trap, and
// the limit still holds from there on.
func TestCorruptSharedDataWasm(t *testing.T) {
	t.Parallel()
	shared := wasmhost.NewSharedData()
	d := newWasm(t, `{"rules":[{"name":"c","max_keys":4,"key":[{"source":"client_ip"}],
		"algorithm":"gcra","limit":2,"window":"1m"}]}`, wasmOptions{shared: shared})
	junk := [][]byte{nil, {0}, []byte("0123456789abcdef"), []byte("0123456789abcdef\x61\xff\xff\xff\xff\xff\xff\xff\x7f"),
		[]byte(strings.Repeat("\xff", 4096))}
	// max_keys 4: one bucket of 8 slots, named after the geometry; and the overflow slots.
	for i := range 8 {
		require.Equal(t, wasmhost.StatusOK, d.host.SetSharedData(fmt.Sprintf("rl|c|4.%d", i), junk[i%len(junk)], 0))
	}
	for i := range 64 {
		require.Equal(t, wasmhost.StatusOK, d.host.SetSharedData(fmt.Sprintf("rl|c|o.%d", i), junk[i%len(junk)], 0))
	}
	for i := range 3 {
		o := d.Do(t, t0, step{})
		if i < 2 {
			require.Zero(t, o.Status, "request %d", i)
		} else {
			require.Equal(t, 429, o.Status)
		}
	}
	require.Zero(t, d.host.Stats().Traps)
}

// An invalid configuration is refused at configure time with the path of the bad field, and
// the plugin does not start.
func TestInvalidConfigRefusedWasm(t *testing.T) {
	t.Parallel()
	_, err := wasmhost.New(context.Background(), wasmtest.BuildModule(t), wasmhost.Options{
		VMID:         "ratelimit",
		PluginConfig: []byte(`{"rules":[{"name":"a","algorithm":"fixed_window","limit":1,"window":"10"}]}`),
		SharedData:   wasmhost.NewSharedData(),
	})
	require.Error(t, err)
	require.Contains(t, err.Error(), `rules[0].window: "10" has no unit`)
}

func errorLogs(h *wasmhost.Host) []string {
	var out []string
	for _, e := range h.Logs() {
		if e.Level >= wasmhost.LogError {
			out = append(out, e.Message)
		}
	}
	return out
}

// sumCalls adds up host-call counts.
func sumCalls(calls map[string]int64) int64 {
	var n int64
	for _, c := range calls {
		n += c
	}
	return n
}

// benchRequest is the request of BenchmarkGuestPerRequest: client-IP and header key, an
// upstream that answers 200.
func benchRequest() wasmhost.Request {
	return wasmhost.Request{Method: "GET", Path: "/api", Authority: "example.test", SourceAddress: "192.0.2.1:5555",
		Headers: [][2]string{{"x-tenant", "acme"}}, Upstream: &wasmhost.UpstreamResponse{Status: 200}}
}

// callsPerRequest serves n benchmark requests after a warm-up (the first request of a key
// creates its slot) and returns the host calls they made, by function, and the allocator
// calls, each divided by n. Every request must be let through with rate-limit headers.
func callsPerRequest(t *testing.T, module, config string, n int) (map[string]float64, float64) {
	t.Helper()
	return callsPerRequestOf(t, module, config, n, benchRequest(), true, nil)
}

// callsPerRequestOf is callsPerRequest for any request let through, with (limited) or
// without rate-limit headers, in a host with the given clusters.
func callsPerRequestOf(t *testing.T, module, config string, n int, req wasmhost.Request, limited bool, clusters map[string]string) (map[string]float64, float64) {
	t.Helper()
	h, err := wasmhost.New(context.Background(), wasmtest.BuildGuest(t, module), wasmhost.Options{
		Workers: 1, VMID: "bench", PluginConfig: []byte(config), SharedData: wasmhost.NewSharedData(), Clusters: clusters,
	})
	require.NoError(t, err)
	defer h.Close(context.Background())
	do := func() {
		res, err := h.Do(context.Background(), req)
		require.NoError(t, err)
		require.Nil(t, res.Local)
		require.Equal(t, limited, res.Header("ratelimit") != "", "rate-limit headers: %v", res.ResponseHeaders)
	}
	do()
	before := h.Stats()
	for range n {
		do()
	}
	after := h.Stats()
	// The guest's Go runtime reads the WASI clock on its own too (its collector does), about
	// 0.002 times per request here. The filter's calls are whole numbers per request, so
	// counts over n requests rounded down to a twentieth leave them exact and drop the
	// runtime's.
	perRequest := func(d int64) float64 { return math.Floor(float64(d)/float64(n)*20) / 20 }
	per := map[string]float64{}
	for name, c := range after.HostCalls {
		if d := perRequest(c - before.HostCalls[name]); d > 0 {
			per[name] = d
		}
	}
	return per, perRequest(after.AllocatorCalls - before.AllocatorCalls)
}

// hostileLate relays script calls to webdis. While hold is set it keeps each call until
// release is closed and then answers it with forged, the answer of a broken or hostile webdis
// (a stand-in in front of Redis), or, when forged is nil, with Redis's own answer. release and
// forged are set before hold.
type hostileLate struct {
	webdis  string
	hold    atomic.Bool
	release chan struct{}
	forged  func(n int64) (status int, body []byte)
	n       atomic.Int64
}

func (r *hostileLate) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if r.hold.Load() {
		n := r.n.Add(1)
		<-r.release
		if r.forged != nil {
			status, forged := r.forged(n)
			w.WriteHeader(status)
			_, _ = w.Write(forged)
			return
		}
	}
	status, answer, err := redistest.Post(r.webdis, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// resetMany starts n requests at once, waits until each one's Redis call is out (calls
// reaches want), and then resets every client's stream together.
func resetMany(t *testing.T, h *wasmhost.Host, n int, calls func() int64, want int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, n)
	for range n {
		go func() {
			_, err := h.Do(ctx, globalRequest())
			done <- err
		}()
	}
	eventually(t, "every request's call is out", func() bool { return calls() == want })
	cancel()
	for range n {
		require.ErrorIs(t, <-done, context.Canceled, "the client reset the stream")
	}
}

// TestGlobalWasmLateHostileAnswers attacks the late-answer path of the compiled module (one
// worker, redis.partitions 1, breaker threshold 6). First eight clients reset their streams
// at once while healthy Redis answers late: every answer is measured once and is a success,
// so resets alone never open the breaker. Then five clients reset while their calls are held,
// and the calls are answered by a hostile stand-in: 200 with bodies that are no script
// result (garbage, a truncated array, a huge body of 1 MiB, an array of the wrong length) and
// a 200 with an empty body. Each late answer must be counted exactly once, as malformed (one
// latency sample, one failure each), open nothing below the threshold, and neither trap, nor
// panic, nor log at error level: a late answer decides nothing, so nothing in it may harm the
// worker. A sixth hostile late answer then opens the breaker (threshold 6 consecutive
// failures), proving the five were heard.
func TestGlobalWasmLateHostileAnswers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	bodies := [][]byte{
		[]byte(`{"EVALSHA":`),
		[]byte(`{"EVALSHA":[1,2`),
		bytes.Repeat([]byte("["), 1<<20),
		[]byte(`{"EVALSHA":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}`),
		nil,
		[]byte(`not json at all`),
	}
	relay := &hostileLate{webdis: srv.WebdisURL()}
	front := httptest.NewServer(relay)
	t.Cleanup(front.Close)
	hold := func(forged func(int64) (int, []byte)) {
		relay.hold.Store(false)
		relay.release, relay.forged = make(chan struct{}), forged
		relay.hold.Store(true)
		release := relay.release
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
	}
	rules := "[" + globalRule("g", `"algorithm":"token_bucket","limit":100000,"window":"1h"`, false) + "]"
	h := newGlobalHost(t, globalConfig(redisOpts{FailureMode: "allow", Failures: 6, Cooldown: "10m"}, rules), front.URL, 1)
	calls := func() int64 { return redisMetric(h, "ratelimit_redis_calls_total") }
	latency := func() uint64 {
		l, _ := h.Histogram("ratelimit_redis_latency_us")
		return l.Count
	}
	malformed := func() int64 { return redisMetric(h, "ratelimit_redis_malformed_total") }
	gauge := func() int64 { return redisMetric(h, "ratelimit_redis_breaker_open") }

	// Healthy Redis, eight resets at once; Redis's own answers arrive once every stream is gone.
	o, _ := doTimed(t, h)
	require.Zero(t, o.Status)
	hold(nil)
	resetMany(t, h, 8, calls, calls()+8)
	require.EqualValues(t, 1, latency(), "no late answer has arrived")
	close(relay.release)
	eventually(t, "every late answer is measured once", func() bool { return latency() == 9 })
	requireNoRedisFailures(t, h)
	require.Zero(t, gauge(), "resets alone never open the breaker")

	forged := func(n int64) (int, []byte) { return 200, bodies[(n-1)%int64(len(bodies))] }
	relay.n.Store(0)
	hold(forged)
	before, beforeLat := calls(), latency()
	resetMany(t, h, 5, calls, before+5)
	require.Zero(t, malformed(), "no answer has arrived")
	close(relay.release)
	eventually(t, "five hostile late answers are heard", func() bool { return malformed() == 5 })
	eventually(t, "and measured once each", func() bool { return latency() == beforeLat+5 })
	require.Zero(t, gauge(), "five failures are below the threshold")
	for _, m := range redisErrorMetrics {
		if m != "ratelimit_redis_malformed_total" {
			require.Zerof(t, redisMetric(h, m), "%s: a malformed answer is counted as malformed only", m)
		}
	}

	// The sixth consecutive failure, also late, opens the breaker.
	hold(forged)
	resetMany(t, h, 1, calls, before+6)
	require.EqualValues(t, 5, malformed(), "the sixth answer is held")
	close(relay.release)
	eventually(t, "the sixth hostile late answer is heard", func() bool { return malformed() == 6 })
	require.EqualValues(t, 1, gauge(), "six late failures in a row open the breaker")

	require.Zero(t, h.Stats().Traps)
	require.Empty(t, h.Stats().FailedVMs)
	requireCleanLogs(t, h)
	for _, e := range h.Logs() {
		require.NotEqual(t, wasmhost.LogError, e.Level, "a late answer logs no error: %+v", e)
	}
}
