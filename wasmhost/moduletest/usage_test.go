package moduletest

import (
	"context"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/fakellm"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// usageRule is a token-bucket rule per API key with a usage cost; its bucket refills 1 token
// an hour per 1000 of capacity, nothing within a test at one instant.
func usageRule(name string, capacity, reserve, max int, pointers []string, onMissing string) string {
	q := make([]string, len(pointers))
	for i, p := range pointers {
		q[i] = strconv.Quote(p)
	}
	return `{"name":"` + name + `","match":{"routes":["` + name + `"]},"key":[{"source":"header","name":"x-api-key"}],` +
		`"algorithm":"token_bucket","limit":` + strconv.Itoa(capacity) + `,"window":"31d",` +
		`"cost":{"reserve":` + strconv.Itoa(reserve) + `,"usage":{"json":[` + strings.Join(q, ",") + `]},"max":` + strconv.Itoa(max) +
		`,"on_missing":"` + onMissing + `"}}`
}

var remainingRe = regexp.MustCompile(`;r=(\d+);`)

// llmRequest is a request on route with the reply rep streamed in its chunks.
func llmRequest(route, key string, rep fakellm.Reply) wasmhost.Request {
	return wasmhost.Request{Worker: -1, Method: "POST", Path: "/v1/chat/completions", Authority: "llm.test",
		Headers: [][2]string{{"x-api-key", key}}, RouteName: route, SourceAddress: "192.0.2.7:4000",
		Upstream: &wasmhost.UpstreamResponse{Status: 200, Headers: [][2]string{{"content-type", rep.ContentType()}},
			Chunks: rep.Chunks()}}
}

// remaining admits one more request of reserve on key and returns the RateLimit r it reports:
// what the key had left minus reserve. Its stream reports a usage of 0 in the shape the route's
// rule reads (Anthropic's on route "anthropic"), so it leaves the key as it found it.
func remaining(t *testing.T, d *wasmDriver, route, key string) int {
	t.Helper()
	shape := fakellm.OpenAI
	if route == "anthropic" {
		shape = fakellm.Anthropic
	}
	res, err := d.host.Do(context.Background(), llmRequest(route, key, fakellm.Reply{Shape: shape, Stream: true}))
	require.NoError(t, err)
	require.Nil(t, res.Local, "denied")
	m := remainingRe.FindStringSubmatch(res.Header("ratelimit") + ";")
	require.NotNil(t, m, "ratelimit header %q", res.Header("ratelimit"))
	n, _ := strconv.Atoi(m[1])
	return n
}

func metric(t *testing.T, d *wasmDriver, name string) int64 {
	t.Helper()
	v, ok := d.host.Metric(name)
	require.True(t, ok, "no metric %s", name)
	return v
}

// The compiled filter reads the usage of OpenAI- and Anthropic-shaped responses, streamed and
// not, settles it, charges on_missing for a stream the upstream cuts and for a client that
// goes away mid-stream, and passes every chunk unchanged.
func TestUsageStreamsWasm(t *testing.T) {
	t.Parallel()
	openai := fakellm.Reply{Shape: fakellm.OpenAI, Stream: true}
	anthropic := fakellm.Reply{Shape: fakellm.Anthropic, Stream: true}
	d := newWasm(t, `{"rules":[`+usageRule("openai", 100000, 100, 5000, openai.Pointers(), "reserve")+`,`+
		usageRule("anthropic", 100000, 100, 5000, anthropic.Pointers(), "max")+`]}`, wasmOptions{workers: 3})
	ctx := context.Background()
	for _, tc := range []struct {
		route string
		rep   fakellm.Reply
	}{
		{"openai", fakellm.Reply{Shape: fakellm.OpenAI, Stream: true, Input: 40, Output: 260, Words: 20, ChunkBytes: 1024}},
		{"openai", fakellm.Reply{Shape: fakellm.OpenAI, Input: 10, Output: 20}},
		// One chunk of 40 KB, read in pieces of abi.MaxBodyRead.
		{"openai", fakellm.Reply{Shape: fakellm.OpenAI, Input: 5, Output: 7, ChunkBytes: 40000}},
		{"anthropic", fakellm.Reply{Shape: fakellm.Anthropic, Stream: true, Input: 25, Output: 15}},
	} {
		r := llmRequest(tc.route, "k1", tc.rep)
		res, err := d.host.Do(ctx, r)
		require.NoError(t, err)
		require.Nil(t, res.Local)
		var whole []byte
		for _, c := range r.Upstream.Chunks {
			whole = append(whole, c...)
		}
		require.Equal(t, string(whole), string(res.ResponseBody), "the client gets the body unchanged")
	}
	// The Anthropic stream's non-streamed twin holds only one of the rule's two pointers
	// (/usage/output_tokens): no usage, and on_missing "max" charges max.
	res, err := d.host.Do(ctx, llmRequest("anthropic", "k1", fakellm.Reply{Shape: fakellm.Anthropic, Input: 5, Output: 5}))
	require.NoError(t, err)
	require.Nil(t, res.Local)
	require.Equal(t, 100000-300-30-12-100, remaining(t, d, "openai", "k1"))
	require.Equal(t, 100000-40-5000-100, remaining(t, d, "anthropic", "k1"))

	// The upstream cuts a stream before its usage: on_missing "reserve" charges the 100.
	cut := llmRequest("openai", "k2", fakellm.Reply{Shape: fakellm.OpenAI, Stream: true, Input: 1, Output: 1})
	cut.Upstream.Chunks, cut.Upstream.Cut = cut.Upstream.Chunks[:3], true
	res, err = d.host.Do(ctx, cut)
	require.NoError(t, err)
	require.True(t, res.Truncated)
	// The client goes away after the first chunk.
	cctx, cancel := context.WithCancel(ctx)
	gone := llmRequest("openai", "k2", fakellm.Reply{Shape: fakellm.OpenAI, Stream: true, Input: 1, Output: 1})
	gone.Upstream.ChunkDelay = time.Hour
	errc := make(chan error, 1)
	go func() { _, err := d.host.Do(cctx, gone); errc <- err }()
	require.Eventually(t, func() bool { v, _ := d.host.Metric("ratelimit_usage_open;rule=openai"); return v == 1 },
		10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	require.Equal(t, 100000-100-100-100, remaining(t, d, "openai", "k2"))

	require.EqualValues(t, 2, metric(t, d, "ratelimit_usage_missing_total;rule=openai"))
	require.EqualValues(t, 1, metric(t, d, "ratelimit_usage_missing_total;rule=anthropic"))
	require.Zero(t, metric(t, d, "ratelimit_usage_open;rule=openai"))
}

// Fifty streams at once on one key, on each of two proxies (two hosts, each with its own
// shared data, as two Envoys) of four workers, with random usages, cuts and client aborts.
// On each proxy, while they are open the reservations never exceed the capacity (at most
// capacity/reserve streams at once), the usage of the admitted streams exceeds the capacity
// by at most F × (max − reserve) with F the streams in flight at once, and once all have
// ended the key has been charged exactly the reported usage plus the on_missing charges.
// Local rules count per proxy: the bound of two proxies is twice one's.
func TestUsageConcurrentStreamsWasm(t *testing.T) {
	t.Parallel()
	const capacity, reserve, maxUsage = 3000, 100, 400
	config := `{"rules":[` + usageRule("openai", capacity, reserve, maxUsage, []string{"/usage/total_tokens"}, "max") + `]}`
	proxies := []*wasmDriver{newWasm(t, config, wasmOptions{workers: 4}), newWasm(t, config, wasmOptions{workers: 4})}
	var wg sync.WaitGroup
	type result struct{ admitted, charged, used int }
	results := make([]result, len(proxies))
	maxOpen := make([]int64, len(proxies))
	for p, d := range proxies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[p].admitted, results[p].charged, results[p].used, maxOpen[p] = concurrentStreams(d, uint64(p), capacity, reserve, maxUsage)
		}()
	}
	wg.Wait()
	for p, d := range proxies {
		r := results[p]
		t.Logf("proxy %d: admitted %d of 50, at most %d at once; charged %d", p, r.admitted, maxOpen[p], r.charged)
		require.LessOrEqual(t, maxOpen[p], int64(capacity/reserve), "the open reservations fit the capacity")
		require.LessOrEqual(t, r.used, capacity+capacity/reserve*(maxUsage-reserve),
			"usage above the capacity is bounded by the streams in flight")
		require.EqualValues(t, r.charged, metric(t, d, "ratelimit_usage_settled_total;rule=openai"))
		require.Zero(t, metric(t, d, "ratelimit_usage_settle_failures_total;rule=openai"))
		require.Zero(t, metric(t, d, "ratelimit_usage_open;rule=openai"))
		if left := capacity - r.charged; left >= reserve {
			require.Equal(t, left-reserve, remaining(t, d, "openai", "shared"), "charged exactly the usage and the on_missing charges")
		} else {
			res, err := d.host.Do(context.Background(), llmRequest("openai", "shared", fakellm.Reply{Stream: true}))
			require.NoError(t, err)
			require.NotNil(t, res.Local, "a key %d below its reservation is denied", reserve-left)
		}
	}
}

// concurrentStreams runs 50 streams at once on one key of d (see
// TestUsageConcurrentStreamsWasm) and returns how many were admitted, what they were charged
// and used, and the most reservations seen open at once.
func concurrentStreams(d *wasmDriver, seed uint64, capacity, reserve, maxUsage int) (admitted, charged, used int, maxOpen int64) {
	r := rand.New(rand.NewPCG(seed, 2))
	var (
		mu              sync.Mutex
		streams, aborts sync.WaitGroup
	)
	abortCtx, abortAll := context.WithCancel(context.Background())
	defer abortAll()
	start := make(chan struct{})
	for range 50 {
		usage := r.IntN(maxUsage + 1)
		kind := r.IntN(5) // 0: the upstream cuts the stream, 1: the client goes away, else reported
		rep := fakellm.Reply{Shape: fakellm.OpenAI, Stream: true, Input: usage / 2, Output: usage - usage/2, Words: 3}
		req := llmRequest("openai", "shared", rep)
		req.Upstream.ChunkDelay = 20 * time.Millisecond
		ctx, charge := context.Background(), usage
		wg := &streams
		switch kind {
		case 0:
			req.Upstream.Chunks, req.Upstream.Cut, charge = req.Upstream.Chunks[:2], true, maxUsage
		case 1:
			// It waits for its second chunk until every other stream has ended.
			req.Upstream.ChunkDelay, ctx, charge, wg = time.Hour, abortCtx, maxUsage, &aborts
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := d.host.Do(ctx, req)
			if err == nil && res.Local != nil {
				return // denied
			}
			mu.Lock()
			defer mu.Unlock()
			admitted++
			charged += charge
			used += usage
		}()
	}
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			v, _ := d.host.Metric("ratelimit_usage_open;rule=openai")
			maxOpen = max(maxOpen, v)
			select {
			case <-abortCtx.Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	close(start)
	streams.Wait()
	// A client that goes away is counted as admitted, so it goes only once the filter has
	// decided all 50 requests: one still waiting for its decision (its goroutine late to
	// start, its callout slow on a loaded machine) would count without a reservation.
	deadline := time.Now().Add(30 * time.Second)
	for decided(d) < 50 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	abortAll()
	aborts.Wait()
	<-sampled
	return admitted, charged, used, maxOpen
}

// decided returns how many requests the "openai" rule of d has allowed or denied.
func decided(d *wasmDriver) int64 {
	allowed, _ := d.host.Metric("ratelimit_requests_total;rule=openai;decision=allowed")
	denied, _ := d.host.Metric("ratelimit_requests_total;rule=openai;decision=denied")
	return allowed + denied
}

// BenchmarkGuestPerChunk measures the guest time one streamed body chunk costs: a stream of an
// SSE reply with 64 content events, less the same stream without them, per event (medians of
// each, and minimums). passthrough is a filter that does nothing; passthrough-read the same filter reading
// every chunk through the ABI (the floor of a filter that reads the body); 1rule the filter
// with a rule without a usage cost (the chunk only crosses the ABI); 1rule-usage the filter
// with a usage rule, which reads and scans every chunk. Events are about 1 KB, 4 KB in the
// 4KB case (the difference is the cost per byte); anthropic is Anthropic's stream, whose
// events have an "event:" line and whose usage rule has two pointers.
func BenchmarkGuestPerChunk(b *testing.B) {
	const events = 64
	usage := func(ptrs ...string) string {
		return `{"rules":[{"name":"u","algorithm":"token_bucket","limit":1000000000,"window":"1s",` +
			`"cost":{"reserve":1,"usage":{"json":["` + strings.Join(ptrs, `","`) + `"]},"max":1000}}]}`
	}
	openai := fakellm.Reply{Shape: fakellm.OpenAI, Stream: true, Input: 1, Output: 1, Words: events, ChunkBytes: 1000}
	big, anthropic := openai, openai
	big.ChunkBytes, anthropic.Shape = 4000, fakellm.Anthropic
	cases := []struct {
		name, module, config string
		reply                fakellm.Reply
	}{
		{"passthrough", "./wasmhost/testdata/passthrough", `{}`, openai},
		{"passthrough-read", "./wasmhost/testdata/passthrough", `{"read_body":true}`, openai},
		{"1rule", ".", `{"rules":[{"name":"r","algorithm":"token_bucket","limit":1000000000,"window":"1s"}]}`, openai},
		{"1rule-usage", ".", usage(openai.Pointers()...), openai},
		{"1rule-usage-4KB", ".", usage(openai.Pointers()...), big},
		{"1rule-usage-anthropic", ".", usage(anthropic.Pointers()...), anthropic},
	}
	for _, c := range cases {
		full := c.reply.Chunks()
		base := slices.Concat(full[:len(full)-events-2], full[len(full)-2:]) // without the content events
		if c.reply.Shape == fakellm.OpenAI {
			base = full[len(full)-2:] // the usage event and [DONE]
		}
		b.Run(c.name, func(b *testing.B) {
			h, err := wasmhost.New(context.Background(), wasmtest.BuildGuest(b, c.module), wasmhost.Options{
				Workers: 1, VMID: "bench", PluginConfig: []byte(c.config), SharedData: wasmhost.NewSharedData(),
			})
			require.NoError(b, err)
			defer h.Close(context.Background())
			stream := func(chunks [][]byte) time.Duration {
				req := benchRequest()
				req.Upstream.Headers = [][2]string{{"content-type", "text/event-stream"}}
				req.Upstream.Chunks = chunks
				before := h.GuestTime()
				res, err := h.Do(context.Background(), req)
				if err != nil || res.Local != nil {
					b.Fatal(err, res.Local)
				}
				return h.GuestTime() - before
			}
			median := func(d []time.Duration) time.Duration {
				slices.Sort(d)
				return d[len(d)/2]
			}
			var bases []time.Duration
			for range 200 {
				bases = append(bases, stream(base))
			}
			var fulls []time.Duration
			for b.Loop() {
				fulls = append(fulls, stream(full))
			}
			b.ReportMetric(float64(median(fulls)-median(bases))/events, "guest-ns/chunk")
			// The least disturbed streams: on a loaded machine other processes only add time.
			b.ReportMetric(float64(slices.Min(fulls)-slices.Min(bases))/events, "min-guest-ns/chunk")
		})
	}
}

// Response bodies of any shape, cut anywhere, never fail the VM: every stream gets its
// response unchanged and is settled (a body without a valid usage charges on_missing).
func TestUsageHostileBodiesWasm(t *testing.T) {
	t.Parallel()
	d := newWasm(t, `{"rules":[`+usageRule("openai", 1000000000, 1, 1000, []string{"/usage/total_tokens", "/a/0/b~1c"}, "reserve")+`]}`,
		wasmOptions{workers: 2})
	r := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"data:", "data: ", "{", "}", "[", "]", `"usage"`, `"total_tokens"`, ":", ",", "\n", "\r\n", "\n\n",
		`"\u00`, `\`, `"`, "123", "-1", "1e9", "null", "true", `"a"`, `"b/c"`, ": comment", "event: x", "\xff\xfe", "[DONE]"}
	for i := range 300 {
		var chunks [][]byte
		for range 1 + r.IntN(6) {
			var c []byte
			for range r.IntN(40) {
				c = append(c, pieces[r.IntN(len(pieces))]...)
			}
			chunks = append(chunks, c)
		}
		ct := "application/json"
		if i%2 == 0 {
			ct = "text/event-stream"
		}
		req := llmRequest("openai", "k", fakellm.Reply{})
		req.Upstream.Headers = [][2]string{{"content-type", ct}}
		req.Upstream.Chunks, req.Upstream.Cut = chunks, i%7 == 0
		res, err := d.host.Do(context.Background(), req)
		require.NoError(t, err)
		require.False(t, res.Failed, "the VM failed")
		require.Nil(t, res.Local)
		var whole []byte
		for _, c := range chunks {
			whole = append(whole, c...)
		}
		require.Equal(t, string(whole), string(res.ResponseBody))
	}
	require.Zero(t, metric(t, d, "ratelimit_usage_open;rule=openai"))
	require.Zero(t, metric(t, d, "ratelimit_usage_settle_failures_total;rule=openai"))
}

// A reported usage too large for an int64 is charged max, in a header as in the body, never
// less than a smaller one; a value that is not a non-negative integer is charged on_missing
// (TestUsageTooLargeIsChargedMaxNative's twin).
func TestUsageTooLargeIsChargedMaxWasm(t *testing.T) {
	t.Parallel()
	for _, source := range []string{"header", "body"} {
		usage := `{"header":"x-usage"}`
		if source == "body" {
			usage = `{"json":["/usage/total_tokens"]}`
		}
		d := newWasm(t, `{"rules":[{"name":"u","algorithm":"token_bucket","limit":100000,"window":"31d",
			"cost":{"reserve":100,"usage":`+usage+`,"max":5000,"on_missing":"reserve"}}]}`, wasmOptions{})
		report := func(v string) {
			up := &wasmhost.UpstreamResponse{Status: 200, Headers: [][2]string{{"content-type", "application/json"}}, Body: []byte("{}")}
			if source == "header" {
				up.Headers = append(up.Headers, [2]string{"x-usage", v})
			} else {
				up.Body = []byte(`{"usage":{"total_tokens":` + v + `}}`)
			}
			res, err := d.host.Do(context.Background(), wasmhost.Request{Worker: -1, Method: "POST", Path: "/", Authority: "llm.test",
				SourceAddress: "192.0.2.7:4000", Upstream: up})
			require.NoError(t, err)
			require.Nil(t, res.Local, "%s %s: denied", source, v)
		}
		for _, v := range []string{"999999999999999999", "1000000000000000000", "99999999999999999999", "123456789012345678901234567890"} {
			report(v)
		}
		require.EqualValues(t, 4*5000, metric(t, d, "ratelimit_usage_settled_total;rule=u"), "%s: each usage is charged max", source)
		require.Zero(t, metric(t, d, "ratelimit_usage_missing_total;rule=u"), source)
		for _, v := range []string{"-1", "1.5", "1e3"} {
			report(v)
		}
		require.EqualValues(t, 4*5000+3*100, metric(t, d, "ratelimit_usage_settled_total;rule=u"), "%s: a malformed usage is charged on_missing", source)
		require.EqualValues(t, 3, metric(t, d, "ratelimit_usage_missing_total;rule=u"), source)
	}
}
