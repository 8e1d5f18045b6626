package filter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A shadow global rule never denies, also when Redis fails under redis.failure_mode "deny":
// the failure is counted and the request goes on.
func TestShadowGlobalRuleNeverDeniesOnRedisFailure(t *testing.T) {
	cfg := `{"redis":{"cluster":"webdis","timeout":"40ms","failure_mode":"deny"},
	"rules":[{"name":"g","scope":"global","shadow":true,"key":[{"source":"header","name":"x-api-key"}],
	"algorithm":"gcra","limit":5,"window":"1m"}]}`
	d := newNative(t, cfg)
	id, callout := d.startGlobal(t, "a")
	d.host.CallOnHttpCallResponse(callout, nil, nil, nil) // a reset
	require.Nil(t, d.host.GetSentLocalResponse(id), "a shadow rule denied on a Redis failure")
}

// The over-limit cache keeps a denial only as long as the rule's longest meaningful wait: a
// hostile or broken answer with a retry-after of 2^53 ns (about 104 days) is clamped like the
// Retry-After header, so a day later the key goes to Redis again instead of staying locked
// out on this worker.
func TestOverLimitCacheClampsTheWait(t *testing.T) {
	cfg := `{"redis":{"cluster":"webdis","timeout":"40ms","failure_mode":"allow"},
	"rules":[{"name":"g","scope":"global","lease":{"batch":10},"key":[{"source":"header","name":"x-api-key"}],
	"algorithm":"gcra","limit":5,"window":"1m"}]}`
	d := newNative(t, cfg)
	id, callout := d.startGlobal(t, "a")
	// The first call asks for a batch; Redis denies it, and the filter asks again for the
	// request's own cost (see leaseGlobal), which Redis denies too.
	for range 2 {
		if d.host.GetSentLocalResponse(id) != nil {
			break
		}
		d.host.CallOnHttpCallResponse(callout, [][2]string{{":status", "200"}},
			nil, []byte(`{"EVALSHA":[1764504000,0,0,0,5,0,9007199254740992,9007199254740992,0]}`))
		c := d.host.GetCalloutAttributesFromContext(id)
		callout = c[len(c)-1].CalloutID
	}
	require.NotNil(t, d.host.GetSentLocalResponse(id))
	*d.now = d.now.Add(24 * time.Hour)
	id2, _ := d.startGlobal(t, "a")
	require.Nil(t, d.host.GetSentLocalResponse(id2), "a day later the key is still denied from the cache")
}

// Units refunded by requests that spent from a lease later replaced are lost, never added to
// the new lease: one holder then never serves more than batch - cost requests from one take.
func TestLeaseRefundNeverInflatesANewerLease(t *testing.T) {
	cfg := `{"redis":{"cluster":"webdis","timeout":"40ms","failure_mode":"allow"},"rules":[
	{"name":"L","continue":true,"key":[{"source":"header","name":"x-api-key"}],"algorithm":"token_bucket","limit":100000,"window":"1h","lease":{"batch":10,"ttl":"10s"}},
	{"name":"G","scope":"global","key":[{"source":"header","name":"x-api-key"}],"algorithm":"gcra","limit":5,"window":"1m"}]}`
	d := newNative(t, cfg)
	allow := []byte(`{"EVALSHA":[1764504000,0,1,1,5,4,0,12000000000,0]}`)
	deny := []byte(`{"EVALSHA":[1764504000,0,0,0,5,0,2500000000,60000000000,0]}`)
	ok := [][2]string{{":status", "200"}}
	_, c1 := d.startGlobal(t, "a")
	d.host.CallOnHttpCallResponse(c1, ok, nil, allow) // takes 10, holds 9
	var pending []uint32
	for range 9 { // the 9 held units are spent by requests that wait for Redis
		_, c := d.startGlobal(t, "a")
		pending = append(pending, c)
	}
	_, c11 := d.startGlobal(t, "a")
	d.host.CallOnHttpCallResponse(c11, ok, nil, allow) // a new take: holds 9
	for _, c := range pending {
		d.host.CallOnHttpCallResponse(c, ok, nil, deny) // the global rule denies: refunds
	}
	taken0, _ := d.host.GetCounterMetric("ratelimit_lease_taken_total;rule=L")
	spent := 0
	for range 40 {
		_, c := d.startGlobal(t, "a")
		d.host.CallOnHttpCallResponse(c, ok, nil, allow)
		if tk, _ := d.host.GetCounterMetric("ratelimit_lease_taken_total;rule=L"); tk != taken0 {
			break
		}
		spent++
	}
	require.LessOrEqual(t, spent, 9, "one take served more requests than batch - cost")
}
