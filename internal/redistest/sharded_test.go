package redistest_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
)

// TestShardedLifecycle checks the sharded harness: webdis reaches the shards through
// nutcracker, keys are placed by their hash tag on every shard, a multi-key EVAL whose keys
// share a tag runs, and a stopped shard fails only the commands for its own keys.
func TestShardedLifecycle(t *testing.T) {
	s := redistest.StartSharded(t, 3)
	per := make([]int, len(s.Shards))
	where := map[string]int{}
	for i := range 30 {
		key := "k:{" + strconv.Itoa(i) + "}"
		if status, body := post(t, s.WebdisURL(), "SET/"+key+"/v"); status != 200 || !strings.Contains(body, "OK") {
			t.Fatalf("SET %s: %d %s", key, status, body)
		}
		sh := s.ShardOf(key)
		if sh < 0 {
			t.Fatalf("%s is on no shard", key)
		}
		per[sh]++
		where[key] = sh
	}
	for i, n := range per {
		if n == 0 {
			t.Fatalf("shard %d holds no key of 30: %v", i, per)
		}
	}
	if status, body := post(t, s.WebdisURL(), "EVAL/return%20redis.call('GET',KEYS[1])..redis.call('GET',KEYS[2])/2/a{t}/b{t}"); status != 200 || strings.Contains(body, "ERR") && !strings.Contains(body, "false") {
		t.Fatalf("EVAL with one tag: %d %s", status, body)
	}
	s.StopShard(1)
	for key, sh := range where {
		status, body := post(t, s.WebdisURL(), "GET/"+key)
		ok := status == 200 && body == `{"GET":"v"}`
		if ok != (sh != 1) {
			t.Fatalf("shard 1 down: GET %s (on shard %d) answered %d %s", key, sh, status, body)
		}
	}
	s.StartShard(1)
	for key, sh := range where {
		if sh != 1 {
			continue
		}
		// The shard came back empty; nutcracker reconnects by itself.
		if status, body := post(t, s.WebdisURL(), "GET/"+key); status != 200 || body != `{"GET":null}` {
			t.Fatalf("shard 1 back: GET %s answered %d %s", key, status, body)
		}
	}
}
