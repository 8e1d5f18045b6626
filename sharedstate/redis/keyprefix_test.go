package redis_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// keyPrefixes are key prefixes the configuration accepts (filter/config, TestKeyPrefixCharacters):
// together every character it accepts, with braces that form a hash tag, that do not, and that
// do not pair up.
var keyPrefixes = []string{"rl", "{app}", "AZaz09_.:-", "a:{b}:c", "x{", "}{x}", "{", "}"}

// braceDescriptors are descriptors a client can choose (a header's value, say) that hold
// braces: a hash tag of their own, an empty one, the domain's, and braces that do not pair up.
var braceDescriptors = []string{"", "a", "{evil}", "{}", "{rl}", "}{x}", "{", "}", "a{b}c", "#{x}"}

// writeEveryKind makes the scripts write every kind of key under prefix and domain "rl": in
// both layouts (one partition and four), a rule's keys for each of braceDescriptors, its key
// set and overflow key (one live key per partition), a settlement's id key, and the partition
// secret. Every call must succeed.
func writeEveryKind(t *testing.T, c *webdisClient, prefix string) {
	t.Helper()
	const now = int64(1_764_480_000_000_000_000)
	bucket := mustRule(t, algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: time.Hour})
	for _, parts := range []int{1, 4} {
		rule := bucket.Partitioned(parts, int64(parts), prefix, "rl", "g")
		for i, d := range braceDescriptors {
			part := redis.Partition(&testSecret, []byte(d), parts)
			it := redis.Item{Rule: rule, Key: rule.AppendKey(nil, part, []byte(d)), N: 2, Part: part}
			a := callOne(t, c, it)
			if !a.Decision.Allowed {
				t.Fatalf("prefix %q, descriptor %q: %+v", prefix, d, a)
			}
			s := redis.Settlement{Item: it, Delta: -1, Overflow: a.Overflow, ReservedAt: now, ID: uint64(i + 1)}
			status, body := c.post(redis.AppendSettleSHA(nil, &s))
			if _, err := redis.ParseSettle(status, body); err != nil {
				t.Fatalf("prefix %q, settlement of %q: %v (%d %s)", prefix, d, err, status, body)
			}
		}
	}
	candidate := redis.NewSecret()
	status, body := c.post(redis.AppendSecretCall(nil, redis.AppendSecretKey(nil, prefix, "rl"), &candidate))
	if _, err := redis.ParseSecret(status, body); err != nil {
		t.Fatalf("prefix %q, partition secret: %v (%d %s)", prefix, err, status, body)
	}
}

// TestKeysStartWithThePrefix: every key the scripts write in a real Redis (writeEveryKind)
// starts with exactly the configured prefix and ':', whatever characters the prefix has and
// whatever braces a descriptor has: what a Redis ACL ~<prefix>:* admits (TestLeastPrivilege).
func TestKeysStartWithThePrefix(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	for _, prefix := range keyPrefixes {
		srv.MustDo("FLUSHALL")
		writeEveryKind(t, c, prefix)
		keys := srv.Keys()
		kinds := map[string]int{}
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix+":") {
				t.Errorf("key %q does not start with the key prefix %q and ':'", k, prefix)
			}
			for _, kind := range []string{":#keys", ":#overflow", ":#settled:", ":#partition-secret"} {
				if strings.Contains(k, kind) {
					kinds[kind]++
				}
			}
		}
		if len(kinds) != 4 || len(keys) < 2*len(braceDescriptors) {
			t.Errorf("prefix %q: %d keys, of them %v: want every kind of key written", prefix, len(keys), kinds)
		}
	}
}

// TestShardedKeyPrefixes: behind twemproxy (hash_tag "{}"), which sends a script to the shard
// of its first key, every key writeEveryKind writes under every prefix is on the shard where
// twemproxy looks for it (each call's keys share a shard), and a prefix with a hash tag of its
// own puts all its keys on one shard.
func TestShardedKeyPrefixes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSharded(t, 3)
	for _, sh := range srv.Shards {
		loadScripts(t, sh)
	}
	c := newClient(t, srv.WebdisURL())
	for _, prefix := range keyPrefixes {
		for _, sh := range srv.Shards {
			sh.MustDo("FLUSHALL")
		}
		writeEveryKind(t, c, prefix)
		var holding []int
		for i, sh := range srv.Shards {
			keys := sh.Keys()
			if len(keys) > 0 {
				holding = append(holding, i)
			}
			for _, k := range keys {
				if srv.Int("EXISTS", k) != 1 {
					t.Errorf("prefix %q: key %q is on shard %d, where twemproxy does not look for it", prefix, k, i)
				}
			}
		}
		if _, ok := prefixTag(prefix); ok && len(holding) != 1 {
			t.Errorf("prefix %q: keys on shards %v, want all on one", prefix, holding)
		}
	}
}

// TestHashTagIsTheConfigurations: a key's Redis Cluster slot (CLUSTER KEYSLOT of a real Redis,
// which twemproxy's hash_tag "{}" picks the same way) comes from the configuration only: every
// key of one partition, its key set, overflow key and settlement id keys are on one slot
// whatever braces the descriptor holds, so a client can neither choose its key's slot nor split
// one call over slots. A prefix with a hash tag of its own puts every key, of every domain and
// partition, on that tag's slot.
func TestHashTagIsTheConfigurations(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{RedisArgs: []string{"--cluster-enabled", "yes"}})
	slot := func(key []byte) int64 {
		t.Helper()
		return srv.Int("CLUSTER", "KEYSLOT", string(key))
	}
	for _, prefix := range keyPrefixes {
		for _, parts := range []int{1, 64} {
			for _, part := range []int{0, 1, parts - 1} {
				want := slot(redis.AppendRuleKey(nil, prefix, "rl", "g", parts, part, "#keys"))
				if got := slot(redis.AppendRuleKey(nil, prefix, "rl", "g", parts, part, "#overflow")); got != want {
					t.Errorf("prefix %q, %d partitions: the overflow key is on slot %d, the key set on %d", prefix, parts, got, want)
				}
				if parts == 1 {
					if got := slot(redis.AppendSecretKey(nil, prefix, "rl")); got != want {
						t.Errorf("prefix %q: the partition secret is on slot %d, the domain's keys on %d", prefix, got, want)
					}
				}
				if tag, ok := prefixTag(prefix); ok {
					if got := slot([]byte(tag)); got != want {
						t.Errorf("prefix %q, %d partitions: keys on slot %d, want the prefix's tag %q's %d", prefix, parts, want, tag, got)
					}
				}
				for _, d := range braceDescriptors {
					key := redis.AppendPartKey(nil, prefix, "rl", "g", parts, part, []byte(d))
					if got := slot(key); got != want {
						t.Errorf("prefix %q, %d partitions, descriptor %q: key %q on slot %d, its key set on %d", prefix, parts, d, key, got, want)
					}
					if got := slot(append(key, ":#settled:1"...)); got != want {
						t.Errorf("prefix %q, descriptor %q: the settlement id key is on slot %d, the key on %d", prefix, d, got, want)
					}
				}
			}
		}
	}
}

// prefixTag returns the hash tag a key prefix holds on its own: the bytes between its first
// '{' and the first '}' after it, when both are in the prefix.
func prefixTag(prefix string) (string, bool) {
	_, rest, ok := strings.Cut(prefix, "{")
	if !ok {
		return "", false
	}
	tag, _, ok := strings.Cut(rest, "}")
	return tag, ok && tag != ""
}
