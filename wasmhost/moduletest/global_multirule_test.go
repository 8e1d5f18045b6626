package moduletest

import (
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// The tests in this file hold the promise that a request denied by any rule is charged nothing
// on the others, for global rules (one script call decides them all and commits only if no
// enforced rule denies) and for local and global rules mixed, against the compiled module in
// the wazero host with a real webdis and redis-server. Package filter runs the same cases
// (filtertest.MultiRuleCases) natively.

func TestGlobalWasmDeniedRequestChargesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range filtertest.MultiRuleCases {
		t.Run(tc.Name, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			filtertest.WaitForHourWindow(t, srv)
			h := newGlobalHost(t, globalConfig(redisOpts{}, tc.Rules), srv.WebdisURL(), 2)
			tc.Run(t, func(key string) outcome {
				o, _ := doTimed(t, h, hdr("x-k", key))
				return o
			})
			requireNoRedisFailures(t, h)
			// A Redis that has not seen the script yet costs the first request a resend.
			calls := redisMetric(h, "ratelimit_redis_calls_total") - redisMetric(h, "ratelimit_redis_noscript_total")
			if strings.Contains(tc.Rules, `"scope":"local"`) {
				// A request the local rule denies sends no callout.
				require.EqualValues(t, tc.AllowedA+3, calls, "callouts")
			} else {
				require.EqualValues(t, 33, calls, "one callout per request, whatever the number of global rules")
			}
		})
	}
}

// TestGlobalWasmDomainNamespacesKeys: the domain is part of every Redis key, so two deployments
// with different domains and the same rule name count separately, and proxies of one domain
// share their counts.
func TestGlobalWasmDomainNamespacesKeys(t *testing.T) {
	t.Parallel()
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
			require.Equalf(t, 0, o.Status, "request %d of its domain must pass", i)
		}
		o, _ := doTimed(t, h, user)
		require.Equal(t, 429, o.Status, "the third request of a domain is over the limit")
	}
	// Another proxy of team-a shares team-a's count.
	o, _ := doTimed(t, a2, user)
	require.Equal(t, 429, o.Status)
	require.ElementsMatch(t, []string{"rl:{team-a}:shared:5:alice", "rl:{team-b}:shared:5:alice",
		"rl:{team-a}:shared:#keys", "rl:{team-b}:shared:#keys"}, srv.Keys())
}

// TestGlobalWasmKeyBound: max_keys bounds a global rule's keys in Redis. New clients beyond it
// share the rule's overflow key (and are counted in key_overflow), while the clients that
// already have a key keep it.
func TestGlobalWasmKeyBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rules := `[{"name":"bounded","max_keys":2,"key":[{"source":"header","name":"x-user"}],
		"algorithm":"gcra","limit":3,"window":"1h","scope":"global"}]`
	h := newGlobalHost(t, globalConfig(redisOpts{}, rules), srv.WebdisURL(), 2)
	for _, u := range []string{"a", "b", "c", "d", "e"} {
		o, _ := doTimed(t, h, hdr("x-user", u))
		require.Equalf(t, 0, o.Status, "user %s", u)
	}
	// c, d and e have used the overflow key's 3; f, a new client, is denied there, while a and
	// b, who have their own keys, are not affected.
	o, _ := doTimed(t, h, hdr("x-user", "f"))
	require.Equal(t, 429, o.Status, "a new client while the overflow key is used up")
	for _, u := range []string{"a", "b"} {
		o, _ := doTimed(t, h, hdr("x-user", u))
		require.Equalf(t, 0, o.Status, "user %s keeps their own key", u)
	}
	require.EqualValues(t, 4, redisMetric(h, "ratelimit_key_overflow_total;rule=bounded"), "c, d, e and f")
	require.ElementsMatch(t, []string{"rl:{rl}:bounded:1:a", "rl:{rl}:bounded:1:b",
		"rl:{rl}:bounded:#keys", "rl:{rl}:bounded:#overflow"}, srv.Keys())
	requireNoRedisFailures(t, h)
}

// A request that several global rules deny states the longest wait among the enforced ones
// (filtertest.CheckLongestWait, which package filter runs natively too).
func TestGlobalWasmDenialStatesTheLongestWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := newGlobalHost(t, globalConfig(redisOpts{}, filtertest.LongestWaitRules), srv.WebdisURL(), 1)
	filtertest.CheckLongestWait(t, func() outcome {
		o, _ := doTimed(t, h)
		return o
	})
	requireNoRedisFailures(t, h)
}
