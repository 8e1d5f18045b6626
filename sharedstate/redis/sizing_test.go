package redis_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// TestSizing measures what the docs' sizing table reports (docs/BENCHMARKS.md, "Global
// decisions per Redis shard"): the global decisions per second one webdis in front of one
// Redis, and in front of three shards behind nutcracker, sustain; the added latency (p50, p99)
// of a decision at 50% and 90% of that rate; and Redis memory per key. It runs only with
// RATELIMIT_SIZING=1, as it loads the machine for about half a minute:
//
//	RATELIMIT_SIZING=1 go test -count=1 -run TestSizing -v ./sharedstate/redis/
//
// Decisions are the filter's calls for one rule (a token bucket, max_keys 100,000) on
// 10,000 distinct keys, each call an EVALSHA posted over HTTP keep-alive, as Envoy's
// callouts are. The load generator runs on the same machine and takes CPU from the servers,
// so the rates are a lower bound.
func TestSizing(t *testing.T) {
	if os.Getenv("RATELIMIT_SIZING") != "1" {
		t.Skip("set RATELIMIT_SIZING=1 to measure (about 30 s of load)")
	}
	webdis := map[string]any{"threads": 2, "pool_size": 8}
	rule := mustRule(t, algorithms.Config{Algorithm: "token_bucket", Limit: 1000000, Window: time.Second})
	t.Run("one-redis", func(t *testing.T) {
		srv := redistest.StartWith(t, redistest.Options{Webdis: webdis})
		loadScripts(t, srv)
		// Memory first, on keys that live an hour (a GCRA of 10 per hour), before the load's
		// keys exist: used_memory before and after 10,000 new keys of a bounded rule.
		mem0 := usedMemory(t, srv)
		r := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 10, Window: time.Hour}).Partitioned(1, 100000, "rl", "d", "m")
		c := newClient(t, srv.WebdisURL())
		for i := range 10000 {
			callOne(t, c, partItem(r, "d", "m", "203.0.113."+strconv.Itoa(i)))
		}
		mem1 := usedMemory(t, srv)
		if n := srv.Int("DBSIZE"); n != 10001 {
			t.Fatalf("%d keys, want 10,000 and the key set", n)
		}
		t.Logf("memory: 10,000 keys (GCRA hashes of ~25-byte names) and their key-set entries take %d bytes: %.0f bytes per key", mem1-mem0, float64(mem1-mem0)/10000)
		measure(t, srv.WebdisURL(), rule.Partitioned(1, 100000, "rl", "d", "r"), 1)
	})
	t.Run("three-shards", func(t *testing.T) {
		srv := redistest.StartShardedWith(t, 3, redistest.Options{Webdis: webdis})
		for _, sh := range srv.Shards {
			loadScripts(t, sh)
		}
		measure(t, srv.WebdisURL(), rule.Partitioned(64, 100000, "rl", "d", "r"), 64)
	})
}

func usedMemory(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, _ := srv.MustDo("INFO", "memory").(string)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	t.Fatalf("no used_memory in INFO: %.200q", info)
	return 0
}

// measure finds the sustained rate with 32 closed-loop clients, then offers 50% and 90% of it
// open-loop (requests sent on a schedule whatever the answers do) and reports p50 and p99 of
// the time from a request's scheduled instant to its answer.
func measure(t *testing.T, url string, rule *redis.Rule, parts int) {
	bodies := make([][]byte, 10000)
	for i := range bodies {
		d := []byte("198.51.100." + strconv.Itoa(i))
		p := redis.Partition(&testSecret, d, parts)
		it := redis.Item{Rule: rule, N: 1, Part: p, Key: redis.AppendPartKey(nil, "rl", "d", "r", parts, p, d)}
		bodies[i] = redis.AppendEvalSHA(nil, redis.TestCallID, []redis.Item{it})
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var failures atomic.Int64
	post := func(i int) {
		resp, err := hc.Post(url, redis.ContentType, bytes.NewReader(bodies[i%len(bodies)]))
		if err != nil {
			failures.Add(1)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.HasPrefix(b, []byte(`{"EVALSHA":[1`)) {
			failures.Add(1)
		}
	}
	// Closed loop: the rate the servers sustain.
	const workers, span = 32, 4 * time.Second
	var done atomic.Int64
	stop := time.Now().Add(span)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i += workers {
				post(i)
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	rate := float64(done.Load()) / span.Seconds()
	t.Logf("sustained: %.0f decisions/s (%d workers, %v, %d failed)", rate, workers, span, failures.Load())
	if failures.Load() > 0 || rate < 100 {
		t.Fatalf("%d failures, %.0f decisions/s", failures.Load(), rate)
	}
	for _, frac := range []float64{0.5, 0.9} {
		offered := rate * frac
		interval := time.Duration(float64(time.Second) / offered)
		n := int(3 * offered)
		lat := make([]time.Duration, n)
		start := time.Now()
		var lw sync.WaitGroup
		for i := range n {
			at := start.Add(time.Duration(i) * interval)
			time.Sleep(time.Until(at))
			lw.Add(1)
			go func() {
				defer lw.Done()
				post(i)
				lat[i] = time.Since(at)
			}()
		}
		lw.Wait()
		slices.Sort(lat)
		t.Logf("at %.0f%% (%.0f/s offered, %d requests): p50 %v, p99 %v, failed %d", frac*100, offered, n,
			lat[n/2].Round(10*time.Microsecond), lat[n*99/100].Round(10*time.Microsecond), failures.Load())
	}
	if failures.Load() > 0 {
		t.Fatal(fmt.Sprintf("%d failures", failures.Load()))
	}
}
