package filter

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The tests in this file hold the promise that a request denied by any rule is charged nothing
// on the others, for global rules (one script call decides them all and commits only if no
// enforced rule denies) and for local and global rules mixed. They run against the compiled
// module in the wazero host and natively under the SDK's emulator, both with a real webdis and
// redis-server: the native driver relays the filter's callout to webdis over HTTP and hands the
// answer back, so both see exactly what Redis decided.

// multiRuleCase is one configuration of the repro in issue 11: 30 requests with x-k: A, then
// one request for each of the keys B, C and D.
type multiRuleCase struct {
	name  string
	rules string
	// allowedA is how many of the 30 requests with key A pass; deniedBy the rule that denies
	// the others ("" when none is denied).
	allowedA int
	deniedBy string
	// routeLeft is the per-route rule's RateLimit remaining after the request with key D.
	routeLeft int
}

// A key rule (fixed window, 2 per hour, keyed on x-k) and a route rule (20 per hour, no key)
// apply to every request; either order, either scope of the key rule, and the key rule as a
// shadow rule.
var multiRuleCases = func() []multiRuleCase {
	perKey := func(scope string, cont, shadow bool) string {
		return fmt.Sprintf(`{"name":"per-key","continue":%v,"shadow":%v,"key":[{"source":"header","name":"x-k"}],
			"algorithm":"fixed_window","limit":2,"window":"1h","scope":%q}`, cont, shadow, scope)
	}
	perRoute := func(cont bool) string {
		return fmt.Sprintf(`{"name":"per-route","continue":%v,"algorithm":"fixed_window","limit":20,"window":"1h","scope":"global"}`, cont)
	}
	return []multiRuleCase{
		// The repro: 2 of A pass, 28 are denied by per-key and cost per-route nothing, so B, C
		// and D pass and per-route has counted 5.
		{"key rule first", "[" + perKey("global", true, false) + "," + perRoute(false) + "]", 2, "per-key", 15},
		{"route rule first", "[" + perRoute(true) + "," + perKey("global", false, false) + "]", 2, "per-key", 15},
		// A local key rule decides first; its denial sends no callout at all.
		{"local key rule, global route rule", "[" + perKey("local", true, false) + "," + perRoute(false) + "]", 2, "per-key", 15},
		// A shadow key rule denies nothing: all 20 of per-route's allowance goes to A, its
		// denials do not stop per-route from counting, and B, C and D are denied by per-route.
		{"shadow key rule", "[" + perKey("global", true, true) + "," + perRoute(false) + "]", 20, "per-route", 0},
	}
}()

// runMultiRule runs one case through do, which sends a request with the given x-k and returns
// its outcome.
func runMultiRule(t *testing.T, tc multiRuleCase, do func(key string) outcome) {
	t.Helper()
	allowed := 0
	for i := range 30 {
		o := do("A")
		if o.status == 0 {
			allowed++
			continue
		}
		require.Equalf(t, 429, o.status, "request %d", i)
		require.Containsf(t, o.body, `"rule":"`+tc.deniedBy+`"`, "request %d", i)
	}
	require.Equal(t, tc.allowedA, allowed, "requests with key A that passed")
	var last outcome
	for _, k := range []string{"B", "C", "D"} {
		last = do(k)
		if tc.deniedBy == "per-route" {
			require.Equalf(t, 429, last.status, "key %s", k)
			require.Containsf(t, last.body, `"rule":"per-route"`, "key %s", k)
			continue
		}
		require.Equalf(t, 0, last.status, "key %s must pass: the denials of A charged per-route nothing (%s)", k, last.body)
	}
	require.Contains(t, last.headers["ratelimit"], fmt.Sprintf(`"per-route";r=%d;`, tc.routeLeft))
}

// waitForHourWindow makes sure the clock-aligned hour of Redis' clock does not end in the
// next ten seconds, so fixed windows of an hour do not reset in the middle of a test.
func waitForHourWindow(t *testing.T, srv *redistest.Server) {
	t.Helper()
	ns := redisTime(t, srv).UnixNano()
	if left := time.Duration(int64(time.Hour) - ns%int64(time.Hour)); left < 10*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
}

func TestGlobalWasmDeniedRequestChargesNothing(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range multiRuleCases {
		t.Run(tc.name, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			waitForHourWindow(t, srv)
			h := newGlobalHost(t, globalConfig(redisOpts{}, tc.rules), srv.WebdisURL(), 2)
			runMultiRule(t, tc, func(key string) outcome {
				o, _ := doTimed(t, h, hdr("x-k", key))
				return o
			})
			requireNoRedisFailures(t, h)
			// A Redis that has not seen the script yet costs the first request a resend.
			calls := redisMetric(h, "ratelimit_redis_calls_total") - redisMetric(h, "ratelimit_redis_noscript_total")
			if strings.Contains(tc.rules, `"scope":"local"`) {
				// A request the local rule denies sends no callout.
				require.EqualValues(t, tc.allowedA+3, calls, "callouts")
			} else {
				require.EqualValues(t, 33, calls, "one callout per request, whatever the number of global rules")
			}
		})
	}
}

func TestGlobalNativeDeniedRequestChargesNothing(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range multiRuleCases {
		t.Run(tc.name, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			waitForHourWindow(t, srv)
			d := newNative(t, globalConfig(redisOpts{}, tc.rules))
			runMultiRule(t, tc, func(key string) outcome {
				return d.doRelayed(t, srv.WebdisURL(), hdr("x-k", key))
			})
		})
	}
}

// doRelayed sends one request through the native filter and relays each callout it makes to
// webdis at url, over real HTTP, until the request is decided.
func (d *nativeDriver) doRelayed(t *testing.T, url string, headers ...[2]string) outcome {
	t.Helper()
	require.NoError(t, d.host.SetProperty([]string{"source", "address"}, []byte("192.0.2.1:5555")))
	id := d.host.InitializeHttpContext()
	defer d.host.CompleteHttpContext(id)
	action := d.host.CallOnRequestHeaders(id, step{headers: headers}.requestHeaders(), true)
	for answered := 0; action == types.ActionPause && d.host.GetSentLocalResponse(id) == nil; answered++ {
		callouts := d.host.GetCalloutAttributesFromContext(id)
		require.Greater(t, len(callouts), answered, "paused without a callout")
		c := callouts[answered]
		resp, err := http.Post(strings.TrimSuffix(url, "/")+"/", "application/x-www-form-urlencoded", bytes.NewReader(c.Body))
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		d.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", fmt.Sprint(resp.StatusCode)}}, nil, body)
		action = d.host.GetCurrentHttpStreamAction(id)
	}
	if resp := d.host.GetSentLocalResponse(id); resp != nil {
		return outcome{status: int(resp.StatusCode), headers: headerMap(resp.Headers), body: string(resp.Data)}
	}
	require.Equal(t, types.ActionContinue, action)
	d.host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
	return outcome{headers: headerMap(d.host.GetCurrentResponseHeaders(id))}
}

// TestGlobalWasmDomainNamespacesKeys: the domain is part of every Redis key, so two deployments
// with different domains and the same rule name count separately, and proxies of one domain
// share their counts.
func TestGlobalWasmDomainNamespacesKeys(t *testing.T) {
	srv := redistest.Start(t)
	rules := `[{"name":"shared","key":[{"source":"header","name":"x-user"}],"algorithm":"gcra","limit":2,"window":"1h","scope":"global"}]`
	withDomain := func(domain string) string {
		return strings.Replace(globalConfig(redisOpts{}, rules), `{"rate_limit_headers"`, `{"domain":"`+domain+`","rate_limit_headers"`, 1)
	}
	a := newGlobalHost(t, withDomain("team-a"), srv.WebdisURL(), 1)
	b := newGlobalHost(t, withDomain("team-b"), srv.WebdisURL(), 1)
	a2 := newGlobalHost(t, withDomain("team-a"), srv.WebdisURL(), 1)
	user := hdr("x-user", "alice")
	for _, h := range []*wasmhost.Host{a, b} {
		for i := range 2 {
			o, _ := doTimed(t, h, user)
			require.Equalf(t, 0, o.status, "request %d of its domain must pass", i)
		}
		o, _ := doTimed(t, h, user)
		require.Equal(t, 429, o.status, "the third request of a domain is over the limit")
	}
	// Another proxy of team-a shares team-a's count.
	o, _ := doTimed(t, a2, user)
	require.Equal(t, 429, o.status)
	require.ElementsMatch(t, []string{"rl:{team-a}:shared:5:alice", "rl:{team-b}:shared:5:alice",
		"rl:{team-a}:shared:#keys", "rl:{team-b}:shared:#keys"}, srv.Keys())
}

// TestGlobalWasmKeyBound: max_keys bounds a global rule's keys in Redis. New clients beyond it
// share the rule's overflow key (and are counted in key_overflow), while the clients that
// already have a key keep it.
func TestGlobalWasmKeyBound(t *testing.T) {
	srv := redistest.Start(t)
	rules := `[{"name":"bounded","max_keys":2,"key":[{"source":"header","name":"x-user"}],
		"algorithm":"gcra","limit":3,"window":"1h","scope":"global"}]`
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), srv.WebdisURL(), 2)
	for _, u := range []string{"a", "b", "c", "d", "e"} {
		o, _ := doTimed(t, h, hdr("x-user", u))
		require.Equalf(t, 0, o.status, "user %s", u)
	}
	// c, d and e have used the overflow key's 3; f, a new client, is denied there, while a and
	// b, who have their own keys, are not affected.
	o, _ := doTimed(t, h, hdr("x-user", "f"))
	require.Equal(t, 429, o.status, "a new client while the overflow key is used up")
	for _, u := range []string{"a", "b"} {
		o, _ := doTimed(t, h, hdr("x-user", u))
		require.Equalf(t, 0, o.status, "user %s keeps their own key", u)
	}
	require.EqualValues(t, 4, redisMetric(h, "ratelimit_bounded_key_overflow_total"), "c, d, e and f")
	require.ElementsMatch(t, []string{"rl:{rl}:bounded:1:a", "rl:{rl}:bounded:1:b",
		"rl:{rl}:bounded:#keys", "rl:{rl}:bounded:#overflow"}, srv.Keys())
	requireNoRedisFailures(t, h)
}
