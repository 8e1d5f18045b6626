package redis_test

import (
	"bytes"
	"errors"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// The tests in this file hold the key layout for sharded stores (see doc.go, "Keys"): a rule
// spread over partitions puts each key, its partition's key set and overflow key on one slot,
// spreads a hot rule's keys over every shard, keeps a key bound per partition, and a shard that
// is down fails only the calls for its own keys. The sharded store is the test harness's
// webdis -> nutcracker -> three redis-servers.

func TestAppendPartKey(t *testing.T) {
	cases := []struct {
		parts int
		desc  string
		want  string
	}{
		{0, "k", "rl:{d}:r:k"},
		{1, "k", "rl:{d}:r:k"},
		// FNV-1a 32 of "k" is 0xee0c38ea = 3993778410: mod 64 = 42, mod 1024 = 234.
		{64, "k", "rl:{d:r:42}:k"},
		{1024, "k", "rl:{d:r:234}:k"},
		{1 << 20, "k", "rl:{d:r:234}:k"}, // at most MaxPartitions
		{64, "a b", "rl:{d:r:" + strconv.Itoa(redis.Partition([]byte("a b"), 64)) + "}:#"},
	}
	for _, c := range cases {
		got := string(redis.AppendPartKey(nil, "rl", "d", "r", c.parts, []byte(c.desc)))
		if c.desc == "a b" {
			if !bytes.HasPrefix([]byte(got), []byte(c.want)) || len(got) != len(c.want)+32 {
				t.Errorf("AppendPartKey(%d, %q) = %q, want %q and 32 hex digits", c.parts, c.desc, got, c.want)
			}
			continue
		}
		if got != c.want {
			t.Errorf("AppendPartKey(%d, %q) = %q, want %q", c.parts, c.desc, got, c.want)
		}
	}
	// A domain with ':' is escaped, so a partitioned key never equals an unpartitioned one.
	if a, b := redis.AppendPartKey(nil, "rl", "d", "r", 2, []byte("x")), redis.AppendKey(nil, "rl", "d:r:"+strconv.Itoa(redis.Partition([]byte("x"), 2)), "r", []byte("x")); bytes.Equal(a, b) {
		t.Errorf("partitioned and unpartitioned layouts share %q", a)
	}
	// Partition is FNV-1a 32 as hash/fnv computes it; it is part of the key layout.
	for _, d := range append(hostile(), []byte(""), []byte("203.0.113.7")) {
		h := fnv.New32a()
		h.Write(d)
		if got, want := redis.Partition(d, 1000), int(h.Sum32()%1000); got != want {
			t.Fatalf("Partition(%q, 1000) = %d, FNV-1a 32 mod 1000 = %d", trunc(d), got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		var buf [96]byte
		redis.AppendPartKey(buf[:0], "rl", "rl", "api", 64, []byte("203.0.113.7"))
	}); n != 0 {
		t.Errorf("AppendPartKey allocates %v times per call", n)
	}
}

// partItem is the item of one key of a partitioned rule, as the filter builds it.
func partItem(rule *redis.Rule, domain, name, desc string) redis.Item {
	d := []byte(desc)
	return redis.Item{Rule: rule, N: 1, Part: redis.Partition(d, rule.Partitions()),
		Key: redis.AppendPartKey(nil, "rl", domain, name, rule.Partitions(), d)}
}

// TestPartitionedKeyBound: with 4 partitions and max_keys 8 each partition admits 2 live keys;
// a third new key of one partition goes to that partition's overflow key while another
// partition still admits keys of its own.
func TestPartitionedKeyBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	rule := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 1, Window: time.Hour}).Partitioned(4, 8, "rl", "d", "r")
	byPart := map[int][]string{}
	for i := 0; len(byPart[0]) < 3 || len(byPart[1]) < 1; i++ {
		d := "client-" + strconv.Itoa(i)
		p := redis.Partition([]byte(d), 4)
		byPart[p] = append(byPart[p], d)
	}
	for i, d := range byPart[0][:3] {
		a := callOne(t, c, partItem(rule, "d", "r", d))
		if a.Decision.Allowed != true || a.Overflow != (i == 2) {
			t.Fatalf("partition 0, key %d: %+v (want the third on the overflow key)", i, a)
		}
	}
	if a := callOne(t, c, partItem(rule, "d", "r", byPart[1][0])); !a.Decision.Allowed || a.Overflow {
		t.Fatalf("partition 1, first key: %+v, want its own key", a)
	}
	if n := srv.Int("ZCARD", "rl:{d:r:0}:#keys"); n != 2 {
		t.Fatalf("partition 0's key set holds %d keys, want 2", n)
	}
	if n := srv.Int("EXISTS", "rl:{d:r:0}:#overflow"); n != 1 {
		t.Fatal("partition 0's overflow key was not written")
	}
	if n := srv.Int("ZCARD", "rl:{d:r:1}:#keys"); n != 1 {
		t.Fatalf("partition 1's key set holds %d keys, want 1", n)
	}
}

// TestShardedSpread: a hot rule's keys, 64 partitions over three shards, land on every shard
// with each partition's key set beside its keys; the counts are logged as the measurement the
// docs cite.
func TestShardedSpread(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSharded(t, 3)
	c := newClient(t, srv.WebdisURL())
	// A window of an hour keeps every key alive until the checks below: with a window of a
	// second a key expires as soon as its bucket is full again, and on a loaded machine the
	// keys written first were gone (on no shard) before their placement was checked.
	rule := mustRule(t, algorithms.Config{Algorithm: "token_bucket", Limit: 100, Window: time.Hour}).Partitioned(64, 100000, "rl", "d", "hot")
	const keys = 600
	for i := range keys {
		it := partItem(rule, "d", "hot", "203.0.113."+strconv.Itoa(i))
		status, body := c.post(redis.AppendEval(nil, []redis.Item{it}))
		out := make([]redis.Answer, 1)
		if _, _, err := redis.ParseReplies(status, body, []redis.Item{it}, out); err != nil || !out[0].Decision.Allowed {
			t.Fatalf("key %d: %+v %v (%d %s)", i, out[0], err, status, body)
		}
	}
	counts := make([]int, len(srv.Shards))
	for i, sh := range srv.Shards {
		for _, k := range sh.Keys() {
			if !bytes.HasSuffix([]byte(k), []byte(":#keys")) {
				counts[i]++
			}
		}
	}
	t.Logf("600 keys of one rule over 3 shards: %v", counts)
	for i, n := range counts {
		if n < keys/6 {
			t.Fatalf("shard %d holds %d of %d keys (%v): the rule does not spread", i, n, keys, counts)
		}
	}
	// Every partition's key set is on the shard of its keys (a script touches one server).
	for p := range 64 {
		set := "rl:{d:hot:" + strconv.Itoa(p) + "}:#keys"
		if sh := srv.ShardOf(set); sh >= 0 {
			for _, k := range srv.Shards[sh].MustDo("ZRANGE", set, "0", "-1").([]any) {
				if srv.ShardOf(k.(string)) != sh {
					t.Fatalf("key %v is not on the shard of its key set %s", k, set)
				}
			}
		}
	}
}

// TestShardDown: with one shard stopped, only the calls for keys on it fail (so only those
// keys fall to the filter's failure mode); every other key is still decided.
func TestShardDown(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSharded(t, 3)
	c := newClient(t, srv.WebdisURL())
	rule := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 1000, Window: time.Second}).Partitioned(64, 1000, "rl", "d", "r")
	shardOf := map[string]int{}
	for i := range 60 {
		d := "client-" + strconv.Itoa(i)
		it := partItem(rule, "d", "r", d)
		c.post(redis.AppendEval(nil, []redis.Item{it}))
		shardOf[d] = srv.ShardOf(string(it.Key))
	}
	srv.StopShard(2)
	var failed, decided int
	for d, sh := range shardOf {
		it := partItem(rule, "d", "r", d)
		status, body := c.post(redis.AppendEval(nil, []redis.Item{it}))
		out := make([]redis.Answer, 1)
		_, _, err := redis.ParseReplies(status, body, []redis.Item{it}, out)
		switch {
		case sh == 2 && err == nil:
			t.Fatalf("%s, on the stopped shard, was decided: %+v", d, out[0])
		case sh == 2 && !errors.Is(err, redis.ErrRedis) && !errors.Is(err, redis.ErrUnavailable):
			t.Fatalf("%s, on the stopped shard: %v, want a Redis error or unavailable", d, err)
		case sh != 2 && (err != nil || !out[0].Decision.Allowed):
			t.Fatalf("%s, on shard %d: %+v %v (%d %s)", d, sh, out[0], err, status, body)
		case sh == 2:
			failed++
		default:
			decided++
		}
	}
	if failed == 0 || decided == 0 {
		t.Fatalf("%d failed, %d decided: want both", failed, decided)
	}
	t.Logf("shard 2 down: %d keys failed, %d decided", failed, decided)
}

// TestShardedDifferential is TestDifferential through the sharded store: every key of the
// differential is one hash tag, so each call runs on one shard, with the same decisions.
func TestShardedDifferential(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSharded(t, 3)
	runDifferential(t, srv.WebdisURL())
}

// TestPartitionedHotPathAllocs: the call of a partitioned, bounded rule is built without
// allocating once the buffers exist, and a partition out of range (a caller's mistake) picks
// a partition's keys instead of panicking.
func TestPartitionedHotPathAllocs(t *testing.T) {
	rule := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 100, Window: time.Second}).Partitioned(64, 1000, "rl", "rl", "api")
	buf := make([]byte, 0, 1024)
	desc := []byte("203.0.113.7")
	items := make([]redis.Item, 1)
	if n := testing.AllocsPerRun(200, func() {
		key := redis.AppendPartKey(buf[:0], "rl", "rl", "api", 64, desc)
		items[0] = redis.Item{Rule: rule, Key: key, N: 1, Part: redis.Partition(desc, 64)}
		if body := redis.AppendEvalSHA(key[len(key):], items); len(body) == 0 {
			t.Fatal("empty body")
		}
	}); n != 0 {
		t.Errorf("%v allocations per partitioned call, want 0", n)
	}
	p := redis.Partition(desc, 64)
	want := "/" + string(redis.Escape(nil, []byte("rl:{rl:api:"+strconv.Itoa(p)+"}:#keys")))
	body := redis.AppendEvalSHA(nil, []redis.Item{{Rule: rule, Key: redis.AppendPartKey(nil, "rl", "rl", "api", 64, desc), N: 1, Part: p}})
	if !bytes.Contains(body, []byte(want)) {
		t.Errorf("the call does not name the key set of partition %d (%s): %s", p, want, body)
	}
	for _, part := range []int{-1, 64, 1 << 30} {
		redis.AppendEvalSHA(nil, []redis.Item{{Rule: rule, Key: []byte("k"), N: 1, Part: part}})
	}
}
