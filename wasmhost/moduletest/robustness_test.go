package moduletest

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

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
