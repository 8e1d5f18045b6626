package filtertest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
)

// ShardDownConfig is the configuration of CheckShardDown: a global GCRA rule "g" keyed by the
// header x-k, over 64 partitions, failure mode deny, each partition's breaker opening at its
// first failure.
var ShardDownConfig = GlobalConfig(RedisOpts{Partitions: 64, Failures: 1, Timeout: "1s"},
	`[{"name":"g","scope":"global","key":[{"source":"header","name":"x-k"}],"algorithm":"gcra","limit":100,"window":"1m"}]`)

// CheckShardDown checks one shard of srv stopped under a proxy of ShardDownConfig (one worker
// VM) that do sends requests with x-k: key through: the keys on it fall to the failure mode
// (deny) and every other key is still decided by Redis, with its headers, over two rounds; the
// partition breakers that open are those of the stopped shard only, so the VM counts itself
// as one with open breakers, and the second round skips the stopped shard's partitions. metric
// reads the filter's counters and gauges.
func CheckShardDown(t *testing.T, srv *redistest.Sharded, do func(t *testing.T, key string) Outcome, metric func(name string) int64) {
	t.Helper()
	shardOf := map[string]int{}
	for i := range 40 {
		k := fmt.Sprintf("client-%d", i)
		if o := do(t, k); o.Status != 0 {
			t.Fatalf("%s before the outage: status %d", k, o.Status)
		}
		shardOf[k] = -1
		for i, sh := range srv.Shards {
			for _, key := range sh.Keys() {
				if strings.HasPrefix(key, "rl:{rl:g:") && strings.HasSuffix(key, ":"+k) {
					shardOf[k] = i
				}
			}
		}
		if shardOf[k] < 0 {
			t.Fatalf("%s's key is on no shard", k)
		}
	}
	srv.StopShard(1)
	failed := 0
	for round := range 2 {
		for k, sh := range shardOf {
			o := do(t, k)
			switch {
			case sh == 1 && o.Status != 429:
				t.Fatalf("round %d: %s is on the stopped shard: status %d, want 429", round, k, o.Status)
			case sh == 1:
				failed++
			case o.Status != 0:
				t.Fatalf("round %d: %s (shard %d) must still be decided by Redis: status %d", round, k, sh, o.Status)
			case !strings.Contains(o.Headers["ratelimit"], `"g";r=`):
				t.Fatalf("round %d: %s (shard %d) decided by Redis without its headers: %v", round, k, sh, o.Headers)
			}
		}
	}
	if failed == 0 {
		t.Fatalf("no key on the stopped shard")
	}
	if open := metric("ratelimit_redis_breaker_open"); open != 1 {
		t.Fatalf("ratelimit_redis_breaker_open %d, want 1: this VM has open partition breakers", open)
	}
	if metric("ratelimit_redis_skipped_total") <= 0 {
		t.Fatalf("nothing skipped: the second round must skip the stopped shard's partitions")
	}
}
