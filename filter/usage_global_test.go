package filter

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Global rules with a usage cost, natively against a real redis-server and webdis on the fake
// clock of newGlobalFleet: Redis admits each request with its reservation, and when the stream
// ends one script call settles the key by usage minus reservation. The same runs against the
// .wasm in wasmhost/moduletest/usage_test.go.

// usageGlobalRule is the global rule "llm" of algo with a usage cost (reserve 100, at most
// 400, from the x-usage response header), per x-api-key.
func usageGlobalRule(algo, onMissing string) string {
	return filtertest.GlobalConfig(filtertest.RedisOpts{}, `[{"name":"llm","scope":"global",`+
		`"key":[{"source":"header","name":"x-api-key"}],`+algo+
		`,"cost":{"reserve":100,"max":400,"on_missing":"`+onMissing+`","usage":{"header":"x-usage"}}}]`)
}

// globalStream is a stream of the fleet whose request Redis has decided.
type globalStream struct {
	id       uint32
	h        *httpContext
	admitted bool
}

// openGlobal starts a request for api key k on worker VM w, relaying its call to webdis at
// url; the stream's context is the test's (as startReset does), so that it can end the
// stream without deleting it and answer the settlement's call first.
func (l *leaseVMs) openGlobal(t *testing.T, w int, url, k string) globalStream {
	t.Helper()
	l.cur = w
	h := &httpContext{}
	l.vms[w].contexts = append(l.vms[w].contexts, h)
	id := l.host.InitializeHttpContext()
	action := l.host.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", "/"}, {"x-api-key", k}}, false)
	require.Equal(t, id, h.id)
	for n := 0; action == types.ActionPause && l.host.GetSentLocalResponse(id) == nil; n++ {
		calls := l.host.GetCalloutAttributesFromContext(id)
		require.Greater(t, len(calls), n, "paused without a callout")
		l.answerAt(t, url, calls[n])
		action = l.host.GetCurrentHttpStreamAction(id)
	}
	return globalStream{id: id, h: h, admitted: l.host.GetSentLocalResponse(id) == nil}
}

// end answers the stream, when respond is set, with usage (a negative one: no x-usage
// header); otherwise the stream ends as it is (cut short, or answered by the caller). It then
// ends, and its settlement call, if any, is answered by answer (nil: left unanswered) before
// the context is deleted. It returns the number of settlement calls.
func (l *leaseVMs) end(t *testing.T, s globalStream, usage int64, respond bool, answer func(proxytest.HttpCalloutAttribute)) int {
	t.Helper()
	before := len(l.host.GetCalloutAttributesFromContext(s.id))
	if respond {
		hdrs := [][2]string{{":status", "200"}}
		if usage >= 0 {
			hdrs = append(hdrs, [2]string{"x-usage", strconv.FormatInt(usage, 10)})
		}
		require.Equal(t, types.ActionContinue, l.host.CallOnResponseHeaders(s.id, hdrs, true))
	}
	// Envoy calls proxy_on_log with the stream effective; the emulator's effective context is
	// the last one it called into, which may be another stream.
	require.NoError(t, abi.SetEffectiveContext(s.id))
	s.h.OnHttpStreamDone()
	calls := l.host.GetCalloutAttributesFromContext(s.id)[before:]
	if answer != nil {
		for _, c := range calls {
			answer(c)
		}
	}
	l.host.CompleteHttpContext(s.id)
	return len(calls)
}

// remainingOf returns what Redis reports left on the key of api key k at the fleet's
// instant, for a rule of cfg (a decision for 0 units, which writes nothing).
func remainingOf(t *testing.T, srv *redistest.Server, l *leaseVMs, cfg algorithms.Config, k string) int64 {
	t.Helper()
	rule, err := redis.NewRule(cfg)
	require.NoError(t, err)
	keys := srv.MustDo("KEYS", "rl:{rl}:llm:*"+k).([]any)
	require.Len(t, keys, 1)
	body := redis.AppendEvalSHA(nil, 0, []redis.Item{{Rule: rule, Key: []byte(keys[0].(string))}})
	body = strconv.AppendInt(append(body, '/'), l.now/1e9, 10)
	body = strconv.AppendInt(append(body, '/'), l.now%1e9, 10)
	status, reply := postWebdis(t, srv.WebdisURL(), body)
	var a [1]redis.Answer
	_, _, err = redis.ParseReplies(status, reply, 0, []redis.Item{{Rule: rule}}, a[:])
	require.NoError(t, err)
	return a[0].Decision.Remaining
}

// TestUsageGlobalExact is the long-run exactness of a global usage cost: with random usages
// (some beyond the reservation, some beyond max), responses without usage and client aborts,
// on 2 proxies of 2 worker VMs with up to 8 streams open at once, what the key has been
// charged in Redis is exactly the sum of the charged usages plus the on_missing charges.
func TestUsageGlobalExact(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		algo, onMissing string
		cfg             algorithms.Config
	}{
		{`"algorithm":"token_bucket","limit":1000,"window":"1h","burst":100000`, "reserve",
			algorithms.Config{Algorithm: "token_bucket", Limit: 1000, Window: 3600e9, Burst: 100000}},
		{`"algorithm":"gcra","limit":1000,"window":"1h","burst":100000`, "max",
			algorithms.Config{Algorithm: "gcra", Limit: 1000, Window: 3600e9, Burst: 100000}},
		{`"algorithm":"leaky_bucket","limit":1000,"window":"1h","burst":100000`, "reserve",
			algorithms.Config{Algorithm: "leaky_bucket", Limit: 1000, Window: 3600e9, Burst: 100000}},
		{`"algorithm":"fixed_window","limit":100000,"window":"1h"`, "max",
			algorithms.Config{Algorithm: "fixed_window", Limit: 100000, Window: 3600e9}},
		{`"algorithm":"sliding_window","limit":100000,"window":"1h"`, "reserve",
			algorithms.Config{Algorithm: "sliding_window", Limit: 100000, Window: 3600e9}},
	} {
		t.Run(tc.cfg.Algorithm, func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, usageGlobalRule(tc.algo, tc.onMissing), 2, 2)
			url := srv.WebdisURL()
			r := rand.New(rand.NewPCG(7, uint64(len(tc.algo))))
			var open []globalStream
			charged, missing, settlements := int64(0), 0, 0
			for i := 0; i < 120; i++ {
				if len(open) < 8 && (len(open) == 0 || r.IntN(2) == 0) {
					s := l.openGlobal(t, r.IntN(4), url, "k1")
					require.True(t, s.admitted)
					open = append(open, s)
					continue
				}
				j := r.IntN(len(open))
				s := open[j]
				open = append(open[:j], open[j+1:]...)
				usage, abort := r.Int64N(600), false
				switch r.IntN(10) {
				case 0:
					usage = -1 // no usage header
				case 1:
					abort = true
				}
				l.cur = 0
				n := l.end(t, s, usage, !abort, l.relayTo(t, url))
				charge := min(usage, 400)
				if usage < 0 || abort {
					missing++
					charge = 100
					if tc.onMissing == "max" {
						charge = 400
					}
				}
				if charge != 100 {
					require.Equal(t, 1, n, "one settlement call: usage %d, abort %v", usage, abort)
					settlements++
				} else {
					require.Zero(t, n, "nothing to settle")
				}
				charged += charge
			}
			charged += 100 * int64(len(open)) // still reserved
			require.Equal(t, int64(100000)-charged, remainingOf(t, srv, l, tc.cfg, "k1"), "charged %d", charged)
			require.NotZero(t, missing)
			require.Greater(t, settlements, 20)
			v, _ := l.host.GetCounterMetric("ratelimit_usage_settle_failures_total;rule=llm")
			require.Zero(t, v)
		})
	}
}

// TestUsageGlobalDeadRedis: Redis is down when the stream ends and stays down. The client got
// its response as usual; the settlement is sent again on the VM's tick 1 s and 2 s after each
// failure, and counted as failed after its third try; nothing waits for Redis.
func TestUsageGlobalDeadRedis(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	l := newGlobalFleet(t, usageGlobalRule(`"algorithm":"gcra","limit":1000,"window":"1h","burst":1000`, "reserve"), 1, 1)
	url := srv.WebdisURL()
	s := l.openGlobal(t, 0, url, "k2")
	require.True(t, s.admitted)
	srv.StopRedis()
	t.Cleanup(srv.StartRedis)
	require.Equal(t, types.ActionContinue, l.host.CallOnResponseHeaders(s.id, [][2]string{{":status", "200"}, {"x-usage", "250"}}, false))
	require.Equal(t, types.ActionContinue, l.host.CallOnResponseBody(s.id, []byte("answer"), true))
	require.Equal(t, "answer", string(l.host.GetCurrentResponseBody(s.id)))
	require.Equal(t, 1, l.end(t, s, 0, false, l.relayTo(t, url)))
	require.EqualValues(t, 1000, l.host.GetTickPeriod(), "the tick runs for the retry")
	for _, wait := range []int64{1e9, 2e9} {
		require.Empty(t, l.tickSettlements(t, wait-1), "not due yet")
		calls := l.tickSettlements(t, 1)
		require.Len(t, calls, 1)
		l.answerAt(t, url, calls[0])
	}
	require.Empty(t, l.tickSettlements(t, 10e9), "three tries at most")
	require.Zero(t, l.host.GetTickPeriod(), "the tick is off again")
	require.EqualValues(t, 1, l.counter("ratelimit_usage_settle_failures_total;rule=llm"))
	require.EqualValues(t, 2, l.counter("ratelimit_usage_settle_retries_total;rule=llm"))
	require.EqualValues(t, 150, l.counter("ratelimit_usage_debt_total;rule=llm"))
}

// TestUsageGlobalSettlementRetried: a settlement whose call failed is sent again on a later
// tick, against the real Redis, and applied once: after a failure answered by the host (webdis
// unavailable: nothing ran), and after a reset whose call Redis had run (the answer was lost:
// the retry's id is already settled, so the key is charged once).
func TestUsageGlobalSettlementRetried(t *testing.T) {
	srv := redistest.Start(t)
	cfg := algorithms.Config{Algorithm: "gcra", Limit: 1000, Window: 3600e9, Burst: 1000}
	for _, ran := range []bool{false, true} {
		t.Run(fmt.Sprint("redis ran it: ", ran), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, usageGlobalRule(`"algorithm":"gcra","limit":1000,"window":"1h","burst":1000`, "reserve"), 1, 1)
			url := srv.WebdisURL()
			s := l.openGlobal(t, 0, url, "k3")
			require.True(t, s.admitted)
			var first proxytest.HttpCalloutAttribute
			require.Equal(t, 1, l.end(t, s, 250, true, func(c proxytest.HttpCalloutAttribute) {
				first = c
				if ran {
					status, _ := postWebdis(t, url, l.timed(c.Body))
					require.Equal(t, 200, status)
					l.host.CallOnHttpCallResponse(c.CalloutID, nil, nil, nil) // a reset
				} else {
					l.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "503"}}, nil, nil)
				}
			}))
			require.Empty(t, l.tickSettlements(t, 999e6), "not due yet")
			calls := l.tickSettlements(t, 1e6)
			require.Len(t, calls, 1)
			require.Equal(t, string(first.Body), string(calls[0].Body), "the same call, under the same id")
			l.answerAt(t, url, calls[0])
			require.Zero(t, l.host.GetTickPeriod(), "the tick is off again")
			require.EqualValues(t, 1000-250, remainingOf(t, srv, l, cfg, "k3"), "charged the usage once")
			require.Zero(t, l.counter("ratelimit_usage_settle_failures_total;rule=llm"))
			require.EqualValues(t, 1, l.counter("ratelimit_usage_settle_retries_total;rule=llm"))
		})
	}
}

// retryWaiting opens a stream of cfg's rule "llm" on a fleet of one VM and ends it with a
// usage of 250, whose settlement call is reset: the settlement then waits for its retry.
func retryWaiting(t *testing.T, cfg string) *leaseVMs {
	srv := redistest.Start(t)
	loadScripts(srv)
	l := newGlobalFleet(t, cfg, 1, 1)
	s := l.openGlobal(t, 0, srv.WebdisURL(), "k8")
	require.True(t, s.admitted)
	require.Equal(t, 1, l.end(t, s, 250, true, func(c proxytest.HttpCalloutAttribute) {
		l.host.CallOnHttpCallResponse(c.CalloutID, nil, nil, nil)
	}))
	require.Len(t, l.vms[0].retries, 1)
	require.EqualValues(t, 1000, l.host.GetTickPeriod(), "the tick runs for the retry")
	require.NoError(t, abi.SetEffectiveContext(proxytest.PluginContextID))
	return l
}

// A settlement waiting for its retry when the VM is configured again (the same partitioned
// configuration, whose own tick is 60 s): the tick keeps running every second for it, and a
// tick that comes too late for its id to guard it in Redis does not send it but counts it as
// failed.
func TestUsageRetryTickAfterReconfigure(t *testing.T) {
	cfg := filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4}, `[{"name":"llm","scope":"global",`+
		`"key":[{"source":"header","name":"x-api-key"}],"algorithm":"gcra","limit":1000,"window":"1h","burst":1000`+
		`,"cost":{"reserve":100,"max":400,"on_missing":"reserve","usage":{"header":"x-usage"}}}]`)
	l := retryWaiting(t, cfg)
	require.NoError(t, l.vms[0].configure([]byte(cfg)))
	require.Len(t, l.vms[0].retries, 1)
	require.EqualValues(t, 1000, l.host.GetTickPeriod(), "the tick still runs for the retry")
	require.Empty(t, l.tickSettlements(t, 30e9), "past the retry window")
	require.Empty(t, l.vms[0].retries)
	require.EqualValues(t, 60000, l.host.GetTickPeriod(), "the configuration's tick")
	require.EqualValues(t, 1, l.counter("ratelimit_usage_settle_failures_total;rule=llm"))
	require.Zero(t, l.counter("ratelimit_usage_settle_retries_total;rule=llm"))
}

// A settlement waiting for its retry when the VM is configured again without Redis is counted
// as failed, and the tick set back to the configuration's (none).
func TestUsageRetryAfterReconfigureWithoutRedis(t *testing.T) {
	l := retryWaiting(t, usageGlobalRule(`"algorithm":"gcra","limit":1000,"window":"1h","burst":1000`, "reserve"))
	local := `{"domain":"d","rules":[{"name":"llm","key":[{"source":"header","name":"x-api-key"}],"algorithm":"gcra","limit":1000,"window":"1h","burst":1000}]}`
	require.NoError(t, l.vms[0].configure([]byte(local)))
	require.Nil(t, l.vms[0].redis)
	require.Empty(t, l.vms[0].retries)
	require.Zero(t, l.host.GetTickPeriod())
	require.EqualValues(t, 1, l.counter("ratelimit_usage_settle_failures_total;rule=llm"))
	l.tickSettlements(t, 1e9)
	for _, m := range l.host.GetErrorLogs() {
		require.NotContains(t, m, "recovered panic")
	}
}

// A settlement waiting for its retry when Envoy retires the VM is counted as failed.
func TestUsageRetryOnPluginDone(t *testing.T) {
	l := retryWaiting(t, usageGlobalRule(`"algorithm":"gcra","limit":1000,"window":"1h","burst":1000`, "reserve"))
	require.True(t, l.vms[0].OnPluginDone())
	require.Empty(t, l.vms[0].retries)
	require.EqualValues(t, 1, l.counter("ratelimit_usage_settle_failures_total;rule=llm"))
}

// relayTo returns a function that relays a call to webdis at url and delivers its answer.
func (l *leaseVMs) relayTo(t *testing.T, url string) func(proxytest.HttpCalloutAttribute) {
	return func(c proxytest.HttpCalloutAttribute) { l.answerAt(t, url, c) }
}

// tickSettlements advances the fleet's clock by d, runs worker 0's tick and returns the calls
// it sent.
func (l *leaseVMs) tickSettlements(t *testing.T, d int64) []proxytest.HttpCalloutAttribute {
	t.Helper()
	l.now += d
	l.cur = 0
	require.NoError(t, abi.SetEffectiveContext(proxytest.PluginContextID))
	before := len(l.host.GetCalloutAttributesFromContext(proxytest.PluginContextID))
	l.vms[0].OnTick()
	return l.host.GetCalloutAttributesFromContext(proxytest.PluginContextID)[before:]
}

// timed is a call's body with the fleet's instant appended, as answerAt sends it.
func (l *leaseVMs) timed(body []byte) []byte {
	b := strconv.AppendInt(append(bytes.Clone(body), '/'), l.now/1e9, 10)
	return strconv.AppendInt(append(b, '/'), l.now%1e9, 10)
}

// counter returns the counter metric name, 0 when it was never incremented.
func (l *leaseVMs) counter(name string) uint64 {
	v, _ := l.host.GetCounterMetric(name)
	return v
}
