package moduletest

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// The compiled module against a sharded store: webdis -> nutcracker -> three redis-servers
// (internal/redistest.StartSharded). With the default layout (redis.partitions 1, one slot
// per domain) the multi-rule cases hold exactly as on one Redis; with partitions 64 a hot
// rule's keys spread over every shard, proxies share each key's limit, and a stopped shard
// sends only its own keys to the failure mode. Package filter runs the same natively.

// resetShards empties every shard (nutcracker forwards no FLUSHALL) and waits, on the first
// shard's clock, until no hour window ends within ten seconds.
func resetShards(t *testing.T, srv *redistest.Sharded) {
	t.Helper()
	for _, sh := range srv.Shards {
		sh.MustDo("FLUSHALL")
	}
	filtertest.WaitForHourWindow(t, srv.Shards[0])
}

func TestGlobalWasmShardedDeniedRequestChargesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSharded(t, 3)
	for _, tc := range filtertest.MultiRuleCases {
		t.Run(tc.Name, func(t *testing.T) {
			resetShards(t, srv)
			h := newGlobalHost(t, globalConfig(redisOpts{}, tc.Rules), srv.WebdisURL(), 2)
			tc.Run(t, func(key string) outcome {
				o, _ := doTimed(t, h, hdr("x-k", key))
				return o
			})
			requireNoRedisFailures(t, h)
		})
	}
}

// shardKeys counts, per shard, the keys of rule that hold a client's state (not the key sets).
func shardKeys(srv *redistest.Sharded, rule string) []int {
	counts := make([]int, len(srv.Shards))
	for i, sh := range srv.Shards {
		for _, k := range sh.Keys() {
			if strings.HasPrefix(k, "rl:{rl:"+rule+":") && !strings.HasSuffix(k, ":#keys") {
				counts[i]++
			}
		}
	}
	return counts
}

// TestGlobalWasmPartitionedSpreads: a hot rule with partitions 64; 60 clients through two
// proxies, each client limited to 3 per hour across both; the clients' keys are on all three
// shards.
func TestGlobalWasmPartitionedSpreads(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSharded(t, 3)
	resetShards(t, srv)
	rules := `[{"name":"hot","key":[{"source":"header","name":"x-user"}],"algorithm":"gcra","limit":3,"window":"1h","scope":"global"}]`
	cfg := globalConfig(redisOpts{Partitions: 64}, rules)
	proxies := []*wasmhost.Host{newGlobalHost(t, cfg, srv.WebdisURL(), 2), newGlobalHost(t, cfg, srv.WebdisURL(), 2)}
	for i := range 60 {
		user := hdr("x-user", fmt.Sprintf("user-%d", i))
		for r := range 4 {
			o, _ := doTimed(t, proxies[r%2], user)
			if r < 3 {
				require.Equalf(t, 0, o.Status, "user %d, request %d", i, r)
			} else {
				require.Equalf(t, 429, o.Status, "user %d: the fourth request over both proxies", i)
			}
		}
	}
	counts := shardKeys(srv, "hot")
	t.Logf("60 keys of one rule over 3 shards: %v", counts)
	for i, n := range counts {
		require.Positivef(t, n, "shard %d holds none of the hot rule's keys: %v", i, counts)
	}
	for _, h := range proxies {
		requireNoRedisFailures(t, h)
	}
}

// TestGlobalWasmPartitionedShardDown: one shard stopped, the keys on it fall to the failure
// mode (deny) and the keys on the other shards are still decided by Redis.
func TestGlobalWasmPartitionedShardDown(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSharded(t, 3)
	resetShards(t, srv)
	rules := `[{"name":"g","key":[{"source":"header","name":"x-user"}],"algorithm":"gcra","limit":100,"window":"1m","scope":"global"}]`
	h := newGlobalHost(t, globalConfig(redisOpts{Partitions: 64, Timeout: "1s"}, rules), srv.WebdisURL(), 1)
	shardOf := map[string]int{}
	for i := range 30 {
		u := fmt.Sprintf("user-%d", i)
		o, _ := doTimed(t, h, hdr("x-user", u))
		require.Equal(t, 0, o.Status)
		shardOf[u] = -1
		for s, sh := range srv.Shards {
			for _, k := range sh.Keys() {
				if strings.HasPrefix(k, "rl:{rl:g:") && strings.HasSuffix(k, ":"+u) {
					shardOf[u] = s
				}
			}
		}
		require.GreaterOrEqual(t, shardOf[u], 0, "%s's key is on no shard", u)
	}
	srv.StopShard(0)
	failed := 0
	for u, s := range shardOf {
		o, _ := doTimed(t, h, hdr("x-user", u))
		if s == 0 {
			require.Equalf(t, 429, o.Status, "%s is on the stopped shard", u)
			failed++
		} else {
			require.Equalf(t, 0, o.Status, "%s (shard %d) is still decided by Redis", u, s)
		}
	}
	require.Positive(t, failed)
}

// TestGlobalWasmPartitionSecretAgreed: two proxies of two worker VMs start on an empty sharded
// store, and their four VMs' first requests race to create the partition secret, each with a
// candidate of its own. Every VM then places every key in the partition the one stored secret
// gives it: each client has exactly one key, in that partition, and its limit (3 an hour)
// holds over all four VMs.
func TestGlobalWasmPartitionSecretAgreed(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSharded(t, 3)
	resetShards(t, srv)
	rules := `[{"name":"hot","key":[{"source":"header","name":"x-user"}],"algorithm":"gcra","limit":3,"window":"1h","scope":"global"}]`
	cfg := globalConfig(redisOpts{Partitions: 64}, rules)
	proxies := []*wasmhost.Host{newGlobalHost(t, cfg, srv.WebdisURL(), 2), newGlobalHost(t, cfg, srv.WebdisURL(), 2)}
	do := func(vm int, user string) outcome {
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
		defer cancel()
		req := globalRequest(hdr("x-user", user))
		req.Worker = vm / 2
		res, err := proxies[vm%2].Do(ctx, req)
		require.NoError(t, err)
		return outcomeOf(res)
	}
	var wg sync.WaitGroup
	first := make([]outcome, 4)
	for vm := range 4 {
		wg.Go(func() { first[vm] = do(vm, fmt.Sprintf("user-%d", vm)) })
	}
	wg.Wait()
	for vm, o := range first {
		require.Equal(t, 0, o.Status, "VM %d's first request", vm)
	}
	for i := range 20 {
		user := fmt.Sprintf("user-%d", i)
		for r := range 4 {
			if i < 4 && r == 0 {
				continue // sent above, on VM i
			}
			vm := r
			if i < 4 {
				vm = (i + r) % 4
			}
			o := do(vm, user)
			if r < 3 {
				require.Equalf(t, 0, o.Status, "%s, request %d (VM %d)", user, r, vm)
			} else {
				require.Equalf(t, 429, o.Status, "%s: the fourth request over four VMs", user)
			}
		}
	}
	secretKey := string(redis.AppendSecretKey(nil, "rl", "rl"))
	stored, err := hex.DecodeString(srv.Shards[srv.ShardOf(secretKey)].MustDo("GET", secretKey).(string))
	require.NoError(t, err)
	secret := redis.Secret(stored)
	for i := range 20 {
		user := fmt.Sprintf("user-%d", i)
		desc := fmt.Sprintf("%d:%s", len(user), user)
		want := string(redis.AppendPartKey(nil, "rl", "rl", "hot", 64, redis.Partition(&secret, []byte(desc), 64), []byte(desc)))
		var found []string
		for _, sh := range srv.Shards {
			for _, k := range sh.Keys() {
				if strings.HasPrefix(k, "rl:{rl:hot:") && strings.HasSuffix(k, "}:"+desc) {
					found = append(found, k)
				}
			}
		}
		require.Equal(t, []string{want}, found, "%s's keys", user)
	}
	for _, h := range proxies {
		requireNoRedisFailures(t, h)
	}
}
