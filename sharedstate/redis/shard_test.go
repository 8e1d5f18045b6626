package redis_test

import (
	"github.com/dchest/siphash"

	"bytes"
	"encoding/binary"
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
		parts, part int
		desc        string
		want        string
	}{
		{0, 7, "k", "rl:{d}:r:k"},
		{1, 7, "k", "rl:{d}:r:k"},
		{64, 42, "k", "rl:{d:r:42}:k"},
		{1024, 1023, "k", "rl:{d:r:1023}:k"},
		{64, 3, "a b", "rl:{d:r:3}:a b"},
		{64, 3, "#k", "rl:{d:r:3}:##k"},
	}
	for _, c := range cases {
		got := string(redis.AppendPartKey(nil, "rl", "d", "r", c.parts, c.part, []byte(c.desc)))
		if got != c.want {
			t.Errorf("AppendPartKey(%d, %d, %q) = %q, want %q", c.parts, c.part, c.desc, got, c.want)
		}
	}
	// A domain with ':' is escaped, so a partitioned key never equals an unpartitioned one.
	if a, b := redis.AppendPartKey(nil, "rl", "d", "r", 2, 1, []byte("x")), redis.AppendKey(nil, "rl", "d:r:1", "r", []byte("x")); bytes.Equal(a, b) {
		t.Errorf("partitioned and unpartitioned layouts share %q", a)
	}
	if n := testing.AllocsPerRun(100, func() {
		var buf [96]byte
		redis.AppendPartKey(buf[:0], "rl", "rl", "api", 64, 5, []byte("203.0.113.7"))
	}); n != 0 {
		t.Errorf("AppendPartKey allocates %v times per call", n)
	}
}

// testSecret is a fixed partition secret, for tests that choose keys by their partition.
var testSecret = redis.Secret{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

// TestPartitionIsKeyed: the partition of a descriptor is SipHash-2-4 under the secret, so it
// cannot be computed without the secret, and keys chosen offline to share a partition do not.
// The keys an attacker could compute for an unkeyed hash (here: 64 descriptors that FNV-1a 32,
// the hash of an earlier layout, puts in one partition of 64, enough to fill that partition's
// share of max_keys 640 five times over) spread over the partitions like any keys; and one
// descriptor lands in other partitions under other secrets.
func TestPartitionIsKeyed(t *testing.T) {
	const parts = 64
	var aimed [][]byte
	for i := 0; len(aimed) < 64; i++ {
		d := []byte("1:" + strconv.Itoa(i))
		h := fnv.New32a()
		h.Write(d)
		if h.Sum32()%parts == 0 {
			aimed = append(aimed, d)
		}
	}
	for trial := range 20 {
		secret := redis.NewSecret()
		hit := map[int]int{}
		for _, d := range aimed {
			p := redis.Partition(&secret, d, parts)
			if p < 0 || p >= parts {
				t.Fatalf("Partition = %d, out of [0, %d)", p, parts)
			}
			hit[p]++
		}
		// 64 keys thrown at random into 64 partitions reach about 40 of them, and the
		// fullest holds about 4; fewer than 20 partitions or more than 12 keys in one is
		// below one chance in 10^9.
		most := 0
		for _, n := range hit {
			most = max(most, n)
		}
		if len(hit) < 20 || most > 12 {
			t.Fatalf("trial %d: 64 keys aimed at one partition reach %d partitions, at most %d keys in one", trial, len(hit), most)
		}
	}
	// The secret decides: the same descriptor under two secrets.
	moved := 0
	for i := range 1000 {
		a, b := redis.NewSecret(), redis.NewSecret()
		d := []byte("client-" + strconv.Itoa(i))
		if redis.Partition(&a, d, parts) != redis.Partition(&b, d, parts) {
			moved++
		}
	}
	if moved < 900 {
		t.Errorf("only %d of 1000 descriptors moved to another partition under another secret (want about 984)", moved)
	}
	// It is SipHash-2-4 of the descriptor, the secret's halves little-endian, mod the
	// partitions (at most MaxPartitions); it is part of the key layout.
	k0, k1 := binary.LittleEndian.Uint64(testSecret[:8]), binary.LittleEndian.Uint64(testSecret[8:])
	for _, d := range append(hostile(), []byte(""), []byte("203.0.113.7")) {
		if got, want := redis.Partition(&testSecret, d, 1000), int(siphash.Hash(k0, k1, d)%1000); got != want {
			t.Fatalf("Partition(%q, 1000) = %d, SipHash-2-4 mod 1000 = %d", trunc(d), got, want)
		}
		if got, want := redis.Partition(&testSecret, d, 1<<20), int(siphash.Hash(k0, k1, d)%redis.MaxPartitions); got != want {
			t.Fatalf("Partition(%q, 1<<20) = %d, want %d (at most MaxPartitions)", trunc(d), got, want)
		}
	}
	if p := redis.Partition(&testSecret, []byte("x"), 1); p != 0 {
		t.Errorf("Partition with one partition = %d", p)
	}
}

// TestPartitionSecret: the secret call against a real Redis, directly and through the sharded
// store. Of two proxies racing to create it the first stores its candidate and both read that
// one; a proxy that knows the secret stores it again when Redis lost it; a value that is not
// a secret is replaced. The answer parser refuses anything but a secret.
func TestPartitionSecret(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sharded := redistest.StartSharded(t, 3)
	for _, tc := range []struct {
		name  string
		url   string
		flush func()
	}{
		{"redis", srv.WebdisURL(), func() { srv.MustDo("FLUSHALL") }},
		{"sharded", sharded.WebdisURL(), func() {
			for _, sh := range sharded.Shards {
				sh.MustDo("FLUSHALL")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.flush()
			c := newClient(t, tc.url)
			key := redis.AppendSecretKey(nil, "rl", "d")
			if string(key) != "rl:{d}:#partition-secret" {
				t.Fatalf("AppendSecretKey = %q", key)
			}
			ask := func(candidate redis.Secret) redis.Secret {
				t.Helper()
				status, body := c.post(redis.AppendSecretCall(nil, key, &candidate))
				s, err := redis.ParseSecret(status, body)
				if err != nil {
					t.Fatalf("%v (%d %s)", err, status, body)
				}
				return s
			}
			a, b := redis.NewSecret(), redis.NewSecret()
			if got := ask(a); got != a {
				t.Fatalf("first call: %x, want its candidate %x", got, a)
			}
			if got := ask(b); got != a {
				t.Fatalf("second call: %x, want the stored %x", got, a)
			}
			tc.flush()
			if got := ask(a); got != a {
				t.Fatalf("after Redis lost it: %x, want the candidate offered again %x", got, a)
			}
			if got := ask(b); got != a {
				t.Fatalf("after it was stored again: %x, want %x", got, a)
			}
			for _, bad := range []string{"xyz", "0123456789ABCDEF0123456789ABCDEF", "0123456789abcdef0123456789abcdeg", ""} {
				status, body := c.post([]byte("SET/" + string(redis.Escape(nil, key)) + "/" + string(redis.Escape(nil, []byte(bad)))))
				if status != 200 {
					t.Fatalf("SET: %d %s", status, body)
				}
				if got := ask(b); got != b {
					t.Fatalf("over %q: %x, want the candidate %x", bad, got, b)
				}
			}
		})
	}
	for _, bad := range []struct {
		status int
		body   string
	}{
		{200, `{"EVAL":"0123456789abcdef0123456789abcde"}`},
		{200, `{"EVAL":"0123456789abcdef0123456789abcdef0"}`},
		{200, `{"EVAL":"0123456789ABCDEF0123456789abcdef"}`},
		{200, `{"EVAL":"0123456789abcdef0123456789abcdef"} x`},
		{200, `{"EVALSHA":"0123456789abcdef0123456789abcdef"}`},
		{200, `{"EVAL":[false,"ERR something"]}`},
		{200, `{"EVAL":12}`},
		{200, ``},
		{503, ``},
		{404, `{"EVAL":"0123456789abcdef0123456789abcdef"}`},
	} {
		if _, err := redis.ParseSecret(bad.status, []byte(bad.body)); err == nil {
			t.Errorf("ParseSecret(%d, %q) accepted it", bad.status, bad.body)
		}
	}
	if s, err := redis.ParseSecret(200, []byte(`{"EVAL":"000102030405060708090a0b0c0d0e0f"}`)); err != nil || s != (redis.Secret{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
		t.Errorf("ParseSecret: %x, %v", s, err)
	}
	var rerr *redis.Error
	if _, err := redis.ParseSecret(200, []byte(`{"EVAL":[false,"ERR x \"y\""]}`)); !errors.As(err, &rerr) || rerr.Message != `ERR x "y"` {
		t.Errorf("an error reply: %v", err)
	}
	if _, err := redis.ParseSecret(200, []byte(`{"EVAL":[false]}`)); !errors.As(err, &rerr) || rerr.Message != "" {
		t.Errorf("an error reply whose message webdis dropped: %v", err)
	}
	if _, err := redis.ParseSecret(200, []byte(`{"EVAL":[false,"ERR x"]} x`)); !errors.Is(err, redis.ErrMalformed) {
		t.Errorf("an error reply with trailing data: %v", err)
	}
}

// partItem is the item of one key of a partitioned rule, as the filter builds it.
func partItem(rule *redis.Rule, domain, name, desc string) redis.Item {
	d := []byte(desc)
	p := redis.Partition(&testSecret, d, rule.Partitions())
	return redis.Item{Rule: rule, N: 1, Part: p, Key: redis.AppendPartKey(nil, "rl", domain, name, rule.Partitions(), p, d)}
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
		p := redis.Partition(&testSecret, []byte(d), 4)
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
	// The script is loaded on every shard, so each call is an EVALSHA: an EVAL would carry
	// the whole script through webdis and nutcracker 600 times.
	for _, sh := range srv.Shards {
		loadScripts(t, sh)
	}
	const keys = 600
	for i := range keys {
		it := partItem(rule, "d", "hot", "203.0.113."+strconv.Itoa(i))
		status, body := c.post(redis.AppendEvalSHA(nil, redis.TestCallID, []redis.Item{it}))
		out := make([]redis.Answer, 1)
		if _, _, err := redis.ParseReplies(status, body, redis.TestCallID, []redis.Item{it}, out); err != nil || !out[0].Decision.Allowed {
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
		c.post(redis.AppendEval(nil, redis.TestCallID, []redis.Item{it}))
		shardOf[d] = srv.ShardOf(string(it.Key))
	}
	srv.StopShard(2)
	var failed, decided int
	for d, sh := range shardOf {
		it := partItem(rule, "d", "r", d)
		status, body := c.post(redis.AppendEval(nil, redis.TestCallID, []redis.Item{it}))
		out := make([]redis.Answer, 1)
		_, _, err := redis.ParseReplies(status, body, redis.TestCallID, []redis.Item{it}, out)
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
		p := redis.Partition(&testSecret, desc, 64)
		key := redis.AppendPartKey(buf[:0], "rl", "rl", "api", 64, p, desc)
		items[0] = redis.Item{Rule: rule, Key: key, N: 1, Part: p}
		if body := redis.AppendEvalSHA(key[len(key):], redis.TestCallID, items); len(body) == 0 {
			t.Fatal("empty body")
		}
	}); n != 0 {
		t.Errorf("%v allocations per partitioned call, want 0", n)
	}
	p := redis.Partition(&testSecret, desc, 64)
	want := "/" + string(redis.Escape(nil, []byte("rl:{rl:api:"+strconv.Itoa(p)+"}:#keys")))
	body := redis.AppendEvalSHA(nil, redis.TestCallID, []redis.Item{{Rule: rule, Key: redis.AppendPartKey(nil, "rl", "rl", "api", 64, p, desc), N: 1, Part: p}})
	if !bytes.Contains(body, []byte(want)) {
		t.Errorf("the call does not name the key set of partition %d (%s): %s", p, want, body)
	}
	for _, part := range []int{-1, 64, 1 << 30} {
		redis.AppendEvalSHA(nil, redis.TestCallID, []redis.Item{{Rule: rule, Key: []byte("k"), N: 1, Part: part}})
	}
}
