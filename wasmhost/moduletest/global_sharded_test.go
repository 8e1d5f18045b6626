package moduletest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
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

// TestGlobalWasmPartitionedShardDown runs filtertest.CheckShardDown against the compiled
// module, one worker VM (package filter runs it natively).
func TestGlobalWasmPartitionedShardDown(t *testing.T) {
	t.Parallel()
	srv := redistest.StartSharded(t, 3)
	resetShards(t, srv)
	h := newGlobalHost(t, filtertest.ShardDownConfig, srv.WebdisURL(), 1)
	do := func(t *testing.T, key string) outcome {
		o, _ := doTimed(t, h, hdr("x-k", key))
		return o
	}
	filtertest.CheckShardDown(t, srv, do, func(name string) int64 { return hostMetric(t, h, name) })
	require.Zero(t, h.Stats().Traps)
}
