package filter

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The global path natively, under the SDK's emulator: the callout the filter sends, and what it
// does with each kind of answer. The same behaviours run against real webdis and Redis in
// wasmhost/moduletest/global_test.go.

const nativeGlobalConfig = `{"redis":{"cluster":"webdis","authority":"webdis.local","timeout":"40ms","failure_mode":"%s"},
	"rules":[{"name":"g","scope":"global","key":[{"source":"header","name":"x-api-key"}],
	"algorithm":"gcra","limit":5,"window":"1m"}]}`

func newNativeGlobal(t *testing.T, failureMode string) *nativeDriver {
	return newNative(t, strings.Replace(nativeGlobalConfig, "%s", failureMode, 1))
}

// start sends a request with an API key and returns its context id; it must be paused on one
// callout.
func (d *nativeDriver) startGlobal(t *testing.T, key string) (uint32, uint32) {
	t.Helper()
	id := d.host.InitializeHttpContext()
	action := d.host.CallOnRequestHeaders(id, step{Headers: [][2]string{hdr("x-api-key", key)}}.RequestHeaders(), true)
	require.Equal(t, types.ActionPause, action)
	callouts := d.host.GetCalloutAttributesFromContext(id)
	require.NotEmpty(t, callouts)
	return id, callouts[len(callouts)-1].CalloutID
}

// answerScript answers callout, the call of request id, with status 200 and the script's
// answer format, whose one verb (%s) is the call's id as the call sent it (its last argument).
func (d *nativeDriver) answerScript(id, callout uint32, format string) {
	for _, c := range d.host.GetCalloutAttributesFromContext(id) {
		if c.CalloutID == callout {
			body := string(c.Body)
			answer := fmt.Sprintf(format, body[strings.LastIndexByte(body, '/')+1:])
			d.host.CallOnHttpCallResponse(callout, [][2]string{{":status", "200"}}, nil, []byte(answer))
			return
		}
	}
	panic(fmt.Sprintf("no callout %d of request %d", callout, id))
}

func TestGlobalNativeCallout(t *testing.T) {
	d := newNativeGlobal(t, "deny")
	id, _ := d.startGlobal(t, "k/1?x.json")
	c := d.host.GetCalloutAttributesFromContext(id)[0]
	require.Equal(t, "webdis", c.Upstream)
	h := filtertest.HeaderMap(c.Headers)
	require.Equal(t, "POST", h[":method"])
	require.Equal(t, "/", h[":path"])
	require.Equal(t, "webdis.local", h[":authority"])
	body := string(c.Body)
	require.True(t, strings.HasPrefix(body, "EVALSHA/"), body)
	// The hostile key travels as one escaped argument: no raw '/', '?' or '.' from it.
	// Three keys: the request's, then the rule's key set and overflow key (max_keys).
	require.Contains(t, body, "/3/rl%3A%7Brl%7D%3Ag%3A")
	require.Contains(t, body, "/rl%3A%7Brl%7D%3Ag%3A%23keys/rl%3A%7Brl%7D%3Ag%3A%23overflow/")
	require.NotContains(t, body, "?")
}

func TestGlobalNativeAnswers(t *testing.T) {
	d := newNativeGlobal(t, "deny")

	id, callout := d.startGlobal(t, "a")
	d.answerScript(id, callout, `{"EVALSHA":[1764504000,0,1,%s,1,5,4,0,12000000000,0]}`)
	require.Equal(t, types.ActionContinue, d.host.GetCurrentHttpStreamAction(id))
	d.host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
	require.Equal(t, `"g";r=4;t=12`, filtertest.HeaderMap(d.host.GetCurrentResponseHeaders(id))["ratelimit"])

	id, callout = d.startGlobal(t, "a")
	d.answerScript(id, callout, `{"EVALSHA":[1764504000,0,0,%s,0,5,0,2500000000,60000000000,0]}`)
	resp := d.host.GetSentLocalResponse(id)
	require.NotNil(t, resp)
	require.EqualValues(t, 429, resp.StatusCode)
	require.Equal(t, "3", filtertest.HeaderMap(resp.Headers)["retry-after"])
}

// An answer to another call (webdis hands the reply of a call whose client went away to the
// next request it serves) is malformed: the request it reaches gets the failure mode (deny
// here), not the other call's admission, and the call it belongs to is still decided by its own.
func TestGlobalNativeAnswerToAnotherCall(t *testing.T) {
	d := newNativeGlobal(t, "deny")
	first, firstCallout := d.startGlobal(t, "a")
	second, secondCallout := d.startGlobal(t, "a")
	idOf := func(id uint32) string {
		body := string(d.host.GetCalloutAttributesFromContext(id)[0].Body)
		return body[strings.LastIndexByte(body, '/')+1:]
	}
	require.NotEqual(t, idOf(first), idOf(second))
	stale := `{"EVALSHA":[1764504000,0,1,` + idOf(first) + `,1,5,4,0,12000000000,0]}`
	d.host.CallOnHttpCallResponse(secondCallout, [][2]string{{":status", "200"}}, nil, []byte(stale))
	resp := d.host.GetSentLocalResponse(second)
	require.NotNil(t, resp, "the other call's admission was taken")
	require.EqualValues(t, 429, resp.StatusCode)
	malformed, _ := d.host.GetCounterMetric("ratelimit_redis_malformed_total")
	require.EqualValues(t, 1, malformed)

	d.host.CallOnHttpCallResponse(firstCallout, [][2]string{{":status", "200"}}, nil, []byte(stale))
	require.Equal(t, types.ActionContinue, d.host.GetCurrentHttpStreamAction(first))
	require.Nil(t, d.host.GetSentLocalResponse(first))
}

// NOSCRIPT: Redis lost the script, and the filter sends it in full once.
func TestGlobalNativeNoScript(t *testing.T) {
	d := newNativeGlobal(t, "deny")
	id, callout := d.startGlobal(t, "a")
	d.host.CallOnHttpCallResponse(callout, [][2]string{{":status", "200"}},
		nil, []byte(`{"EVALSHA":[false,"NOSCRIPT No matching script. Please use EVAL."]}`))
	callouts := d.host.GetCalloutAttributesFromContext(id)
	require.Len(t, callouts, 2)
	require.True(t, strings.HasPrefix(string(callouts[1].Body), "EVAL/"))
	d.answerScript(id, callouts[1].CalloutID, `{"EVAL":[1764504000,0,1,%s,1,5,4,0,12000000000,0]}`)
	require.Equal(t, types.ActionContinue, d.host.GetCurrentHttpStreamAction(id))
	n, err := d.host.GetCounterMetric("ratelimit_redis_noscript_total")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// Each failure mode on a reset callout, and on an answer that is not a script result.
func TestGlobalNativeFailureModes(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want int // 0: continued
	}{{"allow", 0}, {"deny", 429}, {"local", 0}} {
		t.Run(tc.mode, func(t *testing.T) {
			d := newNativeGlobal(t, tc.mode)
			for _, answer := range [][]byte{nil, []byte("<html>")} {
				id, callout := d.startGlobal(t, "a")
				var hdrs [][2]string
				if answer != nil {
					hdrs = [][2]string{{":status", "200"}}
				}
				d.host.CallOnHttpCallResponse(callout, hdrs, nil, answer)
				if tc.want == 0 {
					require.Equal(t, types.ActionContinue, d.host.GetCurrentHttpStreamAction(id))
					require.Nil(t, d.host.GetSentLocalResponse(id))
				} else {
					resp := d.host.GetSentLocalResponse(id)
					require.NotNil(t, resp)
					require.EqualValues(t, tc.want, resp.StatusCode)
				}
			}
			resets, _ := d.host.GetCounterMetric("ratelimit_redis_resets_total")
			malformed, _ := d.host.GetCounterMetric("ratelimit_redis_malformed_total")
			require.EqualValues(t, 1, resets)
			require.EqualValues(t, 1, malformed)
			if tc.mode == "local" {
				// The rule's own limit, on this proxy's shared data, counted both requests.
				allowed, _ := d.host.GetCounterMetric("ratelimit_requests_total;rule=g;decision=allowed")
				require.EqualValues(t, 2, allowed)
			}
		})
	}
}

// TestLateAnswerIsMeasured: the answer to a reset request's call, 7 ms after its send, is a
// round trip of Redis like any other and is recorded in ratelimit_redis_latency_us: leaving
// out the slow answers clients gave up on would flatter the histogram.
func TestLateAnswerIsMeasured(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts},
				`[{"name":"g","scope":"global","algorithm":"token_bucket","limit":10,"window":"1m"}]`), 1, 1)
			id, calls := l.startReset(t, 0)
			require.Len(t, calls, 1)
			l.now += int64(7 * time.Millisecond)
			l.answerAt(t, srv.WebdisURL(), calls[0])
			l.host.CompleteHttpContext(id)
			us, err := l.host.GetHistogramMetric("ratelimit_redis_latency_us")
			require.NoError(t, err)
			require.EqualValues(t, 7000, us)
		})
	}
}

// A callout that Envoy refuses at once with InternalFailure (the cluster has no host) is an
// unavailable Redis, and feeds the breaker; it is not counted as a reset.
func TestCalloutWithoutHostsIsUnavailableNative(t *testing.T) {
	d := newNativeGlobal(t, "allow")
	w := nativeRedisWorker(t, 2)
	for range 2 {
		w.noteFailure(t0.UnixNano(), sendError(abi.ErrInternalFailure))
	}
	require.EqualValues(t, 2, counterNative(d, "ratelimit_redis_unavailable_total"))
	require.Zero(t, counterNative(d, "ratelimit_redis_resets_total"))
	require.EqualValues(t, 1, gaugeNative(t, d, "ratelimit_redis_breaker_open"), "two failures open the breaker")
	// Any other refusal (a cluster Envoy does not know) stays a reset.
	w.noteFailure(t0.UnixNano(), sendError(abi.ErrBadArgument))
	require.EqualValues(t, 1, counterNative(d, "ratelimit_redis_resets_total"))
}

// answeringDriver runs steps natively like nativeDriver, answering every callout a request
// makes with answer (answerScript's format), as a webdis that answers each script call alike
// would, until the request is decided (filtertest.Driver).
type answeringDriver struct {
	*nativeDriver
	answer string
}

// Do runs s at the instant at, answering its callouts.
func (d answeringDriver) Do(t *testing.T, at time.Time, s step) outcome {
	t.Helper()
	*d.now = at
	require.NoError(t, d.host.SetProperty([]string{"xds", "route_name"}, []byte(orNone(s.Route))))
	require.NoError(t, d.host.SetProperty([]string{"xds", "virtual_host_name"}, []byte(orNone(s.VHost))))
	require.NoError(t, d.host.SetProperty([]string{"source", "address"}, []byte(s.SourceAddress())))
	id := d.host.InitializeHttpContext()
	defer d.host.CompleteHttpContext(id)
	d.host.CallOnRequestHeaders(id, s.RequestHeaders(), true)
	// An answer may make the filter call again (NOSCRIPT, a denied batch): answer each new
	// callout until none comes.
	answered := 0
	for range 8 {
		callouts := d.host.GetCalloutAttributesFromContext(id)
		if len(callouts) == answered {
			break
		}
		for _, c := range callouts[answered:] {
			d.answerScript(id, c.CalloutID, d.answer)
		}
		answered = len(callouts)
	}
	if resp := d.host.GetSentLocalResponse(id); resp != nil {
		return outcome{Status: int(resp.StatusCode), Headers: filtertest.HeaderMap(resp.Headers),
			Body: string(resp.Data), GrpcStatus: int(resp.GRPCStatus), FilterState: filterStateNative(d.host, s.WantFilterState)}
	}
	require.Equal(t, types.ActionContinue, d.host.GetCurrentHttpStreamAction(id), "request undecided after %d callouts", answered)
	state := filterStateNative(d.host, s.WantFilterState)
	upstream := filtertest.HeaderMap(d.host.GetCurrentRequestHeaders(id))
	d.host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
	return outcome{Headers: filtertest.HeaderMap(d.host.GetCurrentResponseHeaders(id)), Upstream: upstream, GrpcStatus: -1,
		FilterState: state}
}

// TestGlobalAnswersNative runs filtertest.AnswerCases natively; wasmhost/moduletest runs
// them against the compiled module (TestGlobalAnswersWasm).
func TestGlobalAnswersNative(t *testing.T) {
	for _, c := range filtertest.AnswerCases {
		t.Run(c.Name, func(t *testing.T) {
			d := answeringDriver{newNative(t, c.Config), c.Answer}
			filtertest.Run(t, d, filtertest.Scenario{Name: c.Name, Config: c.Config, Steps: c.Steps})
		})
	}
}
