package filter

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Global rules on a sharded store (webdis -> nutcracker -> three redis-servers), natively:
// with the default layout (one slot per domain) the multi-rule cases hold exactly as on one
// Redis; with redis.partitions > 1 each global rule is its own call to its key's shard, commits
// on its own, and a shard that is down sends only its own keys to the failure mode.

// flushShards empties every shard (nutcracker forwards no FLUSHALL), loads the script into
// each, and waits, on the first shard's clock, until no hour window ends within ten seconds.
//
// The script is loaded ahead because the SDK's emulator numbers a callout by how many of its
// callouts are unanswered, so a NOSCRIPT resend made while another callout of the request is
// pending takes that callout's id and receives its answer (Envoy's tokens are unique).
// TestGlobalNativePartitionedNoScript covers the resend with one callout at a time.
func flushShards(t *testing.T, srv *redistest.Sharded) {
	t.Helper()
	for _, sh := range srv.Shards {
		sh.MustDo("FLUSHALL")
		for _, s := range redis.Scripts() {
			sh.MustDo("SCRIPT", "LOAD", s.Source)
		}
	}
	filtertest.WaitForHourWindow(t, srv.Shards[0])
}

func TestGlobalNativeShardedDeniedRequestChargesNothing(t *testing.T) {
	srv := redistest.StartSharded(t, 3)
	for _, tc := range filtertest.MultiRuleCases {
		t.Run(tc.Name, func(t *testing.T) {
			flushShards(t, srv)
			d := newNative(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, tc.Rules))
			tc.Run(t, func(key string) outcome {
				o, _ := d.doRelayedAll(t, srv.WebdisURL(), hdr("x-k", key))
				return o
			})
		})
	}
}

// doRelayedAll sends one request through the native filter, posts every callout it makes to
// webdis at url as soon as it is made (Envoy sends them all at once, and a call commits in
// Redis whether or not its answer is still wanted), and hands the answers back in the order
// the callouts were made. It returns the outcome and the number of callouts.
func (d *nativeDriver) doRelayedAll(t *testing.T, url string, headers ...[2]string) (outcome, int) {
	t.Helper()
	require.NoError(t, d.host.SetProperty([]string{"source", "address"}, []byte("192.0.2.1:5555")))
	id := d.host.InitializeHttpContext()
	defer d.host.CompleteHttpContext(id)
	action := d.host.CallOnRequestHeaders(id, step{Headers: headers}.RequestHeaders(), true)
	done := 0
	for {
		callouts := d.host.GetCalloutAttributesFromContext(id)
		if done == len(callouts) {
			break
		}
		batch := callouts[done:]
		done = len(callouts)
		answers := make([][]byte, len(batch))
		statuses := make([]int, len(batch))
		for i, c := range batch {
			var err error
			statuses[i], answers[i], err = redistest.Post(url, c.Body)
			require.NoError(t, err)
		}
		for i, c := range batch {
			// Every answer is delivered, also after the request is decided (the filter
			// ignores those): the SDK's emulator numbers a new callout by how many are
			// unanswered, so one left unanswered would share its id with a later one.
			d.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", fmt.Sprint(statuses[i])}}, nil, answers[i])
		}
		action = d.host.GetCurrentHttpStreamAction(id)
	}
	n := len(d.host.GetCalloutAttributesFromContext(id))
	if resp := d.host.GetSentLocalResponse(id); resp != nil {
		return outcome{Status: int(resp.StatusCode), Headers: filtertest.HeaderMap(resp.Headers), Body: string(resp.Data)}, n
	}
	require.Equal(t, types.ActionContinue, action)
	d.host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
	return outcome{Headers: filtertest.HeaderMap(d.host.GetCurrentResponseHeaders(id))}, n
}

// TestGlobalNativePartitioned: with partitions 64, each global rule of a request is one
// callout (two rules: two callouts, each with one key and its partition's key set and
// overflow key). Each commits on its own, which is the documented weaker guarantee: the 28
// requests with key A that per-key denies are charged on per-route (up to its limit), so B, C
// and D find per-route used up. Nothing is ever admitted beyond a limit. The cases in which no
// global rule's denial has to be undone (a local key rule, a shadow key rule) hold exactly.
func TestGlobalNativePartitioned(t *testing.T) {
	srv := redistest.StartSharded(t, 3)
	opts := filtertest.RedisOpts{Partitions: 64}
	for _, tc := range filtertest.MultiRuleCases {
		t.Run(tc.Name, func(t *testing.T) {
			flushShards(t, srv)
			d := newNative(t, filtertest.GlobalConfig(opts, tc.Rules))
			globalKeyRule := !strings.Contains(tc.Rules, `"scope":"local"`) && tc.DeniedBy == "per-key"
			if !globalKeyRule {
				tc.Run(t, func(key string) outcome {
					o, _ := d.doRelayedAll(t, srv.WebdisURL(), hdr("x-k", key))
					return o
				})
				return
			}
			allowed := 0
			for i := range 30 {
				o, calls := d.doRelayedAll(t, srv.WebdisURL(), hdr("x-k", "A"))
				if i == 0 {
					// One call per rule; the first request on each shard may add a NOSCRIPT resend.
					require.GreaterOrEqual(t, calls, 2)
				}
				if o.Status == 0 {
					allowed++
				} else {
					// Both calls are answered at once; whichever enforced denial is handed
					// back first denies the request.
					require.Regexp(t, `"rule":"per-(key|route)"`, o.Body)
				}
			}
			require.Equal(t, 2, allowed, "per-key admits 2 of A")
			for _, k := range []string{"B", "C", "D"} {
				o, _ := d.doRelayedAll(t, srv.WebdisURL(), hdr("x-k", k))
				require.Equal(t, 429, o.Status, "key %s: per-route was charged by A's denials", k)
				require.Contains(t, o.Body, `"rule":"per-route"`)
			}
			// per-route's one key is on one shard, in its partition's slot, and holds its limit.
			secret := storedSecret(t, func(key string) string {
				return srv.Shards[srv.ShardOf(key)].MustDo("GET", key).(string)
			})
			key := string(redis.AppendPartKey(nil, "rl", "rl", "per-route", 64, redis.Partition(&secret, nil, 64), nil))
			sh := srv.ShardOf(key)
			require.GreaterOrEqual(t, sh, 0, "per-route's key %s is on no shard", key)
			require.Equal(t, "20", srv.Shards[sh].MustDo("HGET", key, "c"))
		})
	}
}

// TestGlobalNativePartitionedShardDown runs filtertest.CheckShardDown natively, every call
// relayed to the shards' webdis; wasmhost/moduletest runs it against the
// compiled module.
func TestGlobalNativePartitionedShardDown(t *testing.T) {
	srv := redistest.StartSharded(t, 3)
	flushShards(t, srv)
	d := newNative(t, filtertest.ShardDownConfig)
	do := func(t *testing.T, key string) outcome {
		o, _ := d.doRelayedAll(t, srv.WebdisURL(), hdr("x-k", key))
		return o
	}
	filtertest.CheckShardDown(t, srv, do, func(name string) int64 { return nativeTableDriver{d}.Metric(t, name) })
}

// TestGlobalNativePartitionedNoScript: a shard that has lost the script answers NOSCRIPT, and
// the rule's call is sent again in full, once, to the same partition.
func TestGlobalNativePartitionedNoScript(t *testing.T) {
	srv := redistest.StartSharded(t, 3)
	rules := `[{"name":"g","scope":"global","key":[{"source":"header","name":"x-k"}],"algorithm":"gcra","limit":5,"window":"1m"}]`
	d := newNative(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 64}, rules))
	o, calls := d.doRelayedAll(t, srv.WebdisURL(), hdr("x-k", "a"))
	require.Equal(t, 0, o.Status)
	require.Equal(t, `"g";r=4;t=12`, o.Headers["ratelimit"])
	require.Equal(t, 3, calls, "the partition secret (the VM's first request), then EVALSHA, then EVAL")
	n, err := d.host.GetCounterMetric("ratelimit_redis_noscript_total")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}
