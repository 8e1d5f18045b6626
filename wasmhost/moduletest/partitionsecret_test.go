package moduletest

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

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
