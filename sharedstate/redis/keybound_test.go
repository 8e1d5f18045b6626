package redis_test

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// The tests in this file hold what a global rule may cost Redis: a rule with max_keys keeps at
// most that many live keys (plus its key set and overflow key), new keys beyond it share the
// overflow key's limit, and the keys of active clients are never evicted. They use Redis' own
// clock, because keys expire on it.

// callOne sends one call for a single item and returns its answer.
func callOne(t *testing.T, c *webdisClient, it redis.Item) redis.Answer {
	t.Helper()
	items := []redis.Item{it}
	status, body := c.post(redis.AppendEvalSHA(nil, redis.TestCallID, items))
	out := make([]redis.Answer, 1)
	if _, _, err := redis.ParseReplies(status, body, redis.TestCallID, items, out); err != nil {
		t.Fatalf("%s: %v (%d %s)", it.Key, err, status, body)
	}
	return out[0]
}

func TestKeyBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	// One per hour: no key expires while the test runs, however slow the machine.
	rule := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 1, Window: time.Hour}).Bounded(3, "rl", "d", "r")
	if rule.MaxKeys() != 3 {
		t.Fatalf("MaxKeys %d", rule.MaxKeys())
	}
	key := func(name string, i int) []byte {
		return redis.AppendKey(nil, "rl", "d", name, []byte("client-"+strconv.Itoa(i)))
	}
	for i := range 3 {
		if a := callOne(t, c, redis.Item{Rule: rule, Key: key("r", i), N: 1}); !a.Decision.Allowed || a.Overflow {
			t.Fatalf("client %d, within the bound: %+v", i, a)
		}
	}
	// The fourth new key is decided on the overflow key; the fifth finds it used up.
	if a := callOne(t, c, redis.Item{Rule: rule, Key: key("r", 3), N: 1}); !a.Decision.Allowed || !a.Overflow {
		t.Fatalf("client 3, over the bound: %+v, want allowed on the overflow key", a)
	}
	if a := callOne(t, c, redis.Item{Rule: rule, Key: key("r", 4), N: 1}); a.Decision.Allowed || !a.Overflow {
		t.Fatalf("client 4, over the bound: %+v, want denied on the overflow key", a)
	}
	// An active client keeps its own key and limit: not evicted, not moved to the overflow.
	if a := callOne(t, c, redis.Item{Rule: rule, Key: key("r", 0), N: 1}); a.Decision.Allowed || a.Overflow || a.Decision.RetryAfter <= 0 {
		t.Fatalf("client 0 again: %+v, want its own denial", a)
	}
	// A flood of new keys costs nothing more.
	for i := 5; i < 105; i++ {
		if a := callOne(t, c, redis.Item{Rule: rule, Key: key("r", i), N: 1}); !a.Overflow {
			t.Fatalf("flood key %d: %+v, want the overflow key", i, a)
		}
	}
	if n := srv.Int("DBSIZE"); n != 5 {
		t.Fatalf("%d keys, want 5 (3 clients, the key set, the overflow key): %v", n, srv.Keys())
	}
	if n := srv.Int("ZCARD", "rl:{d}:r:#keys"); n != 3 {
		t.Fatalf("key set holds %d keys, want 3", n)
	}
	// Once the clients' keys have expired, new keys have their own again, and the expired
	// members leave the key set. One per second: a key lives for its reset (1s) plus the 1s
	// margin after its admission.
	short := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 1, Window: time.Second}).Bounded(3, "rl", "d", "s")
	for i := range 3 {
		callOne(t, c, redis.Item{Rule: short, Key: key("s", i), N: 1})
	}
	if n := srv.Int("ZCARD", "rl:{d}:s:#keys"); n != 3 {
		t.Fatalf("key set holds %d keys, want 3", n)
	}
	time.Sleep(2100 * time.Millisecond)
	if a := callOne(t, c, redis.Item{Rule: short, Key: key("s", 200), N: 1}); !a.Decision.Allowed || a.Overflow {
		t.Fatalf("a new key after the others expired: %+v", a)
	}
	if n := srv.Int("ZCARD", "rl:{d}:s:#keys"); n != 1 {
		t.Fatalf("key set holds %d keys after expiry, want 1", n)
	}
	// A denied request writes nothing, also not into the key set.
	other := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 1, Window: time.Hour}).Bounded(3, "rl", "d", "q")
	callOne(t, c, redis.Item{Rule: other, Key: []byte("rl:{d}:q:x"), N: 1})
	if a := callOne(t, c, redis.Item{Rule: other, Key: []byte("rl:{d}:q:y"), N: 5}); a.Decision.Allowed {
		t.Fatalf("5 events on a burst of 1 admitted")
	}
	if n := srv.Int("ZCARD", "rl:{d}:q:#keys"); n != 1 {
		t.Fatalf("a denial added to the key set: %d members", n)
	}
}

// TestKeySizes measures what one key costs Redis (MEMORY USAGE, jemalloc on the tested
// version), per algorithm, for a typical key (a client address under a short rule name), and
// what a key set costs per member. The README's sizing table comes from its log; the bounds
// fail the test if a change makes keys much larger.
func TestKeySizes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	now := int64(1_764_480_000_123_456_789)
	for _, tc := range []struct {
		cfg   algorithms.Config
		n     int64 // events admitted (the log's size grows with them)
		bound int64 // bytes
	}{
		{algorithms.Config{Algorithm: "token_bucket", Limit: 100, Window: time.Minute, Burst: 20}, 1, 160},
		{algorithms.Config{Algorithm: "leaky_bucket", Limit: 100, Window: time.Minute}, 1, 160},
		{algorithms.Config{Algorithm: "gcra", Limit: 100, Window: time.Minute}, 1, 160},
		{algorithms.Config{Algorithm: "fixed_window", Limit: 100, Window: time.Minute}, 1, 160},
		{algorithms.Config{Algorithm: "sliding_window", Limit: 100, Window: time.Minute}, 1, 160},
		{algorithms.Config{Algorithm: "sliding_window", Variant: "log", Limit: 100, Window: time.Minute}, 1, 240},
		{algorithms.Config{Algorithm: "sliding_window", Variant: "log", Limit: 100, Window: time.Minute}, 100, 2600},
	} {
		rule := mustRule(t, tc.cfg)
		key := redis.AppendKey(nil, "rl", "rl", "api", []byte("203.0.113.7"))
		srv.MustDo("DEL", string(key))
		for range tc.n {
			if rep := c.mustCall(rule.AppendEvalSHAAt(nil, key, 1, now)); !rep.Decision.Allowed {
				t.Fatalf("%s: denied", cfgName(tc.cfg))
			}
		}
		size := srv.Int("MEMORY", "USAGE", string(key), "SAMPLES", "0")
		t.Logf("%-40s %d events: %d bytes (key %q, %d bytes)", cfgName(tc.cfg), tc.n, size, key, len(key))
		if size > tc.bound {
			t.Errorf("%s: %d bytes, more than %d", cfgName(tc.cfg), size, tc.bound)
		}
	}
	// A key set of 10,000 members, as max_keys 10000 allows, and what 10,000 keys cost in all
	// (used_memory: the states, their entries in Redis' key and expiry tables, and the key
	// set). The calls go straight to Redis (the call's arguments as webdis would decode them),
	// pipelined a thousand at a time: what they store is the same, without webdis' CPU and a
	// round trip per call.
	usedMemory := func() int64 {
		info := srv.MustDo("INFO", "memory").(string)
		var v int64
		for _, line := range strings.Split(info, "\n") {
			if n, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				v, _ = strconv.ParseInt(n, 10, 64)
			}
		}
		return v
	}
	srv.MustDo("FLUSHALL")
	before := usedMemory()
	rule := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 100, Window: time.Hour}).Bounded(10000, "rl", "rl", "api")
	items := make([]redis.Item, 1)
	var body []byte
	var calls [][]string
	for i := range 10000 {
		items[0] = redis.Item{Rule: rule, Key: redis.AppendKey(nil, "rl", "rl", "api", []byte(fmt.Sprintf("203.0.%d.%d", i/256, i%256))), N: 1}
		body = redis.AppendEvalSHAItemsAt(body[:0], items, now)
		var args []string
		for _, a := range strings.Split(string(body), "/") {
			arg, err := url.PathUnescape(a)
			if err != nil {
				t.Fatalf("%q: %v", a, err)
			}
			args = append(args, arg)
		}
		if calls = append(calls, args); len(calls) == 1000 {
			if _, err := srv.DoAll(calls...); err != nil {
				t.Fatal(err)
			}
			calls = calls[:0]
		}
	}
	// Every call was admitted on a key of its own: 10,000 states and the key set, no overflow key.
	if n, keys := srv.Int("ZCARD", "rl:{rl}:api:#keys"), srv.Int("DBSIZE"); n != 10000 || keys != 10001 {
		t.Fatalf("the key set holds %d members and the database %d keys, want 10000 and 10001", n, keys)
	}
	total := usedMemory() - before
	set := srv.Int("MEMORY", "USAGE", "rl:{rl}:api:#keys", "SAMPLES", "0")
	t.Logf("key set with 10000 members: %d bytes, %d per member; 10000 gcra keys with their key set: %d bytes of used_memory, %d per key",
		set, set/10000, total, total/10000)
	if set/10000 > 150 {
		t.Errorf("key set: %d bytes per member", set/10000)
	}
}
