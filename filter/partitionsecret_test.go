package filter

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The partition secret natively, against a real redis-server and webdis: with redis.partitions
// > 1 a key's partition is a keyed hash under a secret the proxies read from Redis (see
// global.go and package redis, partition.go).

// fleetSecret is the partition secret of newGlobalFleet's VMs.
var fleetSecret = redis.Secret{0xf1, 0xee, 0x75, 0xec, 0x2e, 0x70, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}

// storedSecret returns the partition secret Redis holds for key prefix and domain "rl", read
// with get (a GET on the server that holds the key).
func storedSecret(t *testing.T, get func(key string) string) redis.Secret {
	t.Helper()
	b, err := hex.DecodeString(get(string(redis.AppendSecretKey(nil, "rl", "rl"))))
	require.NoError(t, err)
	require.Len(t, b, redis.SecretSize)
	return redis.Secret(b)
}

// secretRule is a global rule of 2 an hour per x-k over 64 partitions.
var secretRule = filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 64, FailureMode: "deny", Failures: 2},
	`[{"name":"g","scope":"global","key":[{"source":"header","name":"x-k"}],"algorithm":"gcra","limit":2,"window":"1h"}]`)

// newSecretFleet is newGlobalFleet of secretRule whose VMs do not know the secret yet, as
// VMs that have just started.
func newSecretFleet(t *testing.T, proxies int) *leaseVMs {
	l := newGlobalFleet(t, secretRule, proxies, 1)
	for _, p := range l.vms {
		p.redis.secretKnown = false
	}
	return l
}

// partKeyOf returns the Redis key of secretRule's descriptor desc under secret.
func partKeyOf(secret *redis.Secret, desc string) string {
	return string(redis.AppendPartKey(nil, "rl", "rl", "g", 64, redis.Partition(secret, []byte(desc), 64), []byte(desc)))
}

// startSecret starts a request of client k on VM w, which must wait for its one call: the
// secret's.
func (l *leaseVMs) startSecret(t *testing.T, w int, k string) (uint32, proxytest.HttpCalloutAttribute) {
	t.Helper()
	l.cur = w
	id := l.host.InitializeHttpContext()
	action := l.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, hdr("x-k", k)}, true)
	require.Equal(t, types.ActionPause, action)
	calls := l.host.GetCalloutAttributesFromContext(id)
	require.Len(t, calls, 1, "the secret's call first")
	require.Contains(t, string(calls[0].Body), "partition-secret")
	return id, calls[0]
}

// finish answers the calls request id sent after its first (its rules' calls) and reports
// whether it was admitted.
func (l *leaseVMs) finish(t *testing.T, id uint32, url string) bool {
	t.Helper()
	defer l.host.CompleteHttpContext(id)
	for done := 1; ; done++ {
		calls := l.host.GetCalloutAttributesFromContext(id)
		if done >= len(calls) {
			break
		}
		l.answerAt(t, url, calls[done])
	}
	require.NotEqual(t, types.ActionPause, l.host.GetCurrentHttpStreamAction(id))
	return l.host.GetSentLocalResponse(id) == nil
}

// TestPartitionSecretAgreedByProxies: two proxies start at once on an empty Redis and race to
// create the secret, each offering its own; the first call to arrive stores its candidate and
// both read that one. They then place a client's key in the same partition, so the client's
// limit (2 an hour) holds across both: its third request, on either proxy, is denied.
func TestPartitionSecretAgreedByProxies(t *testing.T) {
	srv := redistest.Start(t)
	for _, first := range []int{0, 1} {
		t.Run(fmt.Sprint("proxy ", first, " stores it"), func(t *testing.T) {
			loadScripts(srv)
			l := newSecretFleet(t, 2)
			id0, c0 := l.startSecret(t, 0, "alice")
			id1, c1 := l.startSecret(t, 1, "alice")
			require.NotEqual(t, c0.Body, c1.Body, "each offers a candidate of its own")
			ids, calls := []uint32{id0, id1}, []proxytest.HttpCalloutAttribute{c0, c1}
			// Redis runs the two calls in the order they arrive: first's, then the other's.
			var status [2]int
			var answer [2][]byte
			status[first], answer[first] = postWebdis(t, srv.WebdisURL(), calls[first].Body)
			status[1-first], answer[1-first] = postWebdis(t, srv.WebdisURL(), calls[1-first].Body)
			// The answers reach the VMs last call first, each request finished before the
			// next answer: the SDK's emulator numbers a new callout by how many are
			// unanswered, so a call sent while an older one is out could take its number.
			for _, w := range []int{1, 0} {
				l.host.CallOnHttpCallResponse(calls[w].CalloutID, [][2]string{{":status", fmt.Sprint(status[w])}}, nil, answer[w])
				require.True(t, l.finish(t, ids[w], srv.WebdisURL()))
			}

			stored := storedSecret(t, func(key string) string { return srv.MustDo("GET", key).(string) })
			require.Contains(t, string(calls[first].Body), hex.EncodeToString(stored[:]), "the first call to arrive stored its candidate")
			for w, p := range l.vms {
				require.True(t, p.redis.secretKnown)
				require.Equal(t, stored, p.redis.secret, "proxy %d", w)
			}
			require.EqualValues(t, 1, srv.Int("EXISTS", partKeyOf(&stored, "5:alice")), "alice's one key")
			ok, _ := l.doRelayed(t, first, srv.WebdisURL(), hdr("x-k", "alice"))
			require.False(t, ok, "alice's third request, over both proxies")
			ok, _ = l.doRelayed(t, 1-first, srv.WebdisURL(), hdr("x-k", "alice"))
			require.False(t, ok)
		})
	}
}

// TestPartitionFollowsTheSecret: the partition of a key is the one the secret in Redis gives
// it, so keys chosen without the secret cannot be aimed at one partition: with one secret
// stored, a client's key is in one partition; with another, in another.
func TestPartitionFollowsTheSecret(t *testing.T) {
	srv := redistest.Start(t)
	a, b := redis.NewSecret(), redis.NewSecret()
	desc := ""
	for i := 0; desc == ""; i++ {
		if d := fmt.Sprintf("%d:c%d", len(fmt.Sprint("c", i)), i); redis.Partition(&a, []byte(d), 64) != redis.Partition(&b, []byte(d), 64) {
			desc = d
		}
	}
	_, client, _ := strings.Cut(desc, ":")
	// One proxy per secret (the emulator runs one fleet at a time).
	l := newSecretFleet(t, 2)
	for w, s := range []redis.Secret{a, b} {
		loadScripts(srv)
		srv.MustDo("SET", string(redis.AppendSecretKey(nil, "rl", "rl")), hex.EncodeToString(s[:]))
		id, c := l.startSecret(t, w, client)
		l.answerAt(t, srv.WebdisURL(), c)
		require.True(t, l.finish(t, id, srv.WebdisURL()))
		require.Equal(t, s, l.vms[w].redis.secret)
		keys, _ := srv.MustDo("KEYS", "rl:{rl:g:*}:"+desc).([]any)
		require.Equal(t, []any{partKeyOf(&s, desc)}, keys)
	}
}

// TestPartitionSecretRedisDown: a VM that does not know the secret and cannot read it applies
// the failure mode to the request's global rules (deny here), counts the failure and feeds its
// breaker, which opens after two failures; once Redis answers again the VM learns the secret
// and decides as usual.
func TestPartitionSecretRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	l := newSecretFleet(t, 1)
	metric := func(name string) uint64 {
		n, _ := l.host.GetCounterMetric(name)
		return n
	}
	for i := range 2 {
		id, c := l.startSecret(t, 0, "bob")
		l.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "503"}}, nil, nil)
		require.NotNil(t, l.host.GetSentLocalResponse(id), "failure_mode deny, request %d", i)
		require.EqualValues(t, 429, l.host.GetSentLocalResponse(id).StatusCode)
		l.host.CompleteHttpContext(id)
	}
	require.EqualValues(t, 2, metric("ratelimit_redis_unavailable_total"))
	require.False(t, l.vms[0].redis.secretKnown)
	ok, calls := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "bob"))
	require.False(t, ok, "the breaker is open: failure mode at once")
	require.Zero(t, calls)
	require.EqualValues(t, 1, metric("ratelimit_redis_skipped_total"))

	l.now += int64(10 * time.Second) // past the cooldown
	ok, calls = l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "bob"))
	require.True(t, ok)
	require.Equal(t, 2, calls, "the secret, then the rule")
	require.True(t, l.vms[0].redis.secretKnown)
	ok, calls = l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "bob"))
	require.True(t, ok)
	require.Equal(t, 1, calls, "the rule alone: the VM keeps the secret")
}

// TestPartitionSecretRefresh: the VM reads the secret again on its tick every minute,
// offering its own. When Redis has lost it, the refresh stores it again (so a proxy that
// starts later reads the one the others use); when another proxy stored another one first,
// the VM adopts it, says so in the log, and places keys under it from then on.
func TestPartitionSecretRefresh(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	d := newNative(t, secretRule)
	require.EqualValues(t, 60_000, d.host.GetTickPeriod(), "the refresh alone needs the tick: once a minute")
	o, calls := d.doRelayedAll(t, srv.WebdisURL(), hdr("x-k", "carol"))
	require.Equal(t, 0, o.Status)
	require.Equal(t, 2, calls, "the secret, then the rule")
	get := func(key string) string { s, _ := srv.MustDo("GET", key).(string); return s }
	s := storedSecret(t, get)

	tick := func() []proxytest.HttpCalloutAttribute {
		t.Helper()
		before := len(d.host.GetCalloutAttributesFromContext(proxytest.PluginContextID))
		d.host.Tick()
		return d.host.GetCalloutAttributesFromContext(proxytest.PluginContextID)[before:]
	}
	relay := func(c proxytest.HttpCalloutAttribute) {
		t.Helper()
		status, body := postWebdis(t, srv.WebdisURL(), c.Body)
		d.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", fmt.Sprint(status)}}, nil, body)
	}
	*d.now = d.now.Add(59 * time.Second)
	require.Empty(t, tick(), "not due yet")

	srv.MustDo("FLUSHALL") // Redis lost everything, the secret included
	*d.now = d.now.Add(2 * time.Second)
	refresh := tick()
	require.Len(t, refresh, 1)
	require.True(t, bytes.Contains(refresh[0].Body, []byte(hex.EncodeToString(s[:]))), "the VM offers its own secret")
	relay(refresh[0])
	require.Equal(t, s, storedSecret(t, get), "stored again")

	other := redis.NewSecret()
	srv.MustDo("SET", string(redis.AppendSecretKey(nil, "rl", "rl")), hex.EncodeToString(other[:]))
	*d.now = d.now.Add(61 * time.Second)
	refresh = tick()
	require.Len(t, refresh, 1)
	relay(refresh[0])
	require.Contains(t, fmt.Sprint(d.host.GetWarnLogs()), "partition secret")
	o, calls = d.doRelayedAll(t, srv.WebdisURL(), hdr("x-k", "dave"))
	require.Equal(t, 0, o.Status)
	require.Equal(t, 1, calls)
	keys, _ := srv.MustDo("KEYS", "rl:{rl:g:*}:4:dave").([]any)
	require.Equal(t, []any{partKeyOf(&other, "4:dave")}, keys, "placed under the adopted secret")
}

// postWebdis sends a call's body to webdis at url and returns the answer.
func postWebdis(t *testing.T, url string, body []byte) (int, []byte) {
	t.Helper()
	status, answer, err := redistest.Post(url, body)
	require.NoError(t, err)
	return status, answer
}
