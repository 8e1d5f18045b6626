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

// TestKeysStartWithThePrefix: every key the scripts write in a real Redis (a rule's keys, its
// key set and overflow key, a settlement's id key, the partition secret), in both layouts,
// starts with exactly the configured prefix and ':', whatever characters the prefix has and
// whatever braces a descriptor has: what a Redis ACL ~<prefix>:* admits (TestLeastPrivilege).
func TestKeysStartWithThePrefix(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	const now = int64(1_764_480_000_000_000_000)
	bucket := mustRule(t, algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: time.Hour})
	for _, prefix := range keyPrefixes {
		srv.MustDo("FLUSHALL")
		for _, parts := range []int{1, 4} {
			// One live key per partition: the second key of a partition is on its overflow key.
			rule := bucket.Partitioned(parts, int64(parts), prefix, "rl", "g")
			for i, d := range braceDescriptors {
				part := redis.Partition(&testSecret, []byte(d), parts)
				it := redis.Item{Rule: rule, Key: rule.AppendKey(nil, part, []byte(d)), N: 2, Part: part}
				a := callOne(t, c, it)
				if !a.Decision.Allowed {
					t.Fatalf("prefix %q, descriptor %q: %+v", prefix, d, a)
				}
				s := redis.Settlement{Item: it, Delta: -1, Overflow: a.Overflow, ReservedAt: now, ID: uint64(i + 1)}
				if status, body := c.post(redis.AppendSettleSHA(nil, &s)); status != 200 {
					t.Fatalf("prefix %q, settlement of %q: %d %s", prefix, d, status, body)
				} else if _, err := redis.ParseSettle(status, body); err != nil {
					t.Fatalf("prefix %q, settlement of %q: %v", prefix, d, err)
				}
			}
		}
		candidate := redis.NewSecret()
		status, body := c.post(redis.AppendSecretCall(nil, redis.AppendSecretKey(nil, prefix, "rl"), &candidate))
		if _, err := redis.ParseSecret(status, body); err != nil {
			t.Fatalf("prefix %q, partition secret: %v", prefix, err)
		}

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
