package filter

import (
	"fmt"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestResetGivesLeaseUnitsBack: y's lease admits a request, which then waits for Redis on x;
// the client resets the stream before the answer. The request never reached the upstream, so
// the unit y's lease gave it goes back to the lease, as when another rule denies the request
// (refundLeases): it is still debited and within the lease's ttl. Otherwise it would be
// neither spent by an admitted request nor counted as dropped.
func TestResetGivesLeaseUnitsBack(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 0), 1, 1)
			url := srv.WebdisURL()
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "A"), hdr("x-y", "late"))
			require.True(t, ok)
			held := l.vms[0].rules[1].lease.held[yKey]
			require.NotNil(t, held)
			require.EqualValues(t, 9, held.units)

			n := l.resetMidCall(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
			require.Equal(t, 1, n, "x's call only: y's lease admitted the request")
			require.Same(t, held, l.vms[0].rules[1].lease.held[yKey])
			require.EqualValues(t, 9, held.units, "the reset request's unit is back in y's lease")
		})
	}
}

// Units refunded by requests that spent from a lease later replaced are lost, never added to
// the new lease: one holder then never serves more than batch - cost requests from one take.
func TestLeaseRefundNeverInflatesANewerLease(t *testing.T) {
	cfg := `{"redis":{"cluster":"webdis","timeout":"40ms","failure_mode":"allow"},"rules":[
	{"name":"L","continue":true,"key":[{"source":"header","name":"x-api-key"}],"algorithm":"token_bucket","limit":100000,"window":"1h","lease":{"batch":10,"ttl":"10s"}},
	{"name":"G","scope":"global","key":[{"source":"header","name":"x-api-key"}],"algorithm":"gcra","limit":5,"window":"1m"}]}`
	d := newNative(t, cfg)
	allow := `{"EVALSHA":[1764504000,0,1,%s,1,5,4,0,12000000000,0]}`
	deny := `{"EVALSHA":[1764504000,0,0,%s,0,5,0,2500000000,60000000000,0]}`
	r1, c1 := d.startGlobal(t, "a")
	d.answerScript(r1, c1, allow) // takes 10, holds 9
	var pending [][2]uint32
	for range 9 { // the 9 held units are spent by requests that wait for Redis
		r, c := d.startGlobal(t, "a")
		pending = append(pending, [2]uint32{r, c})
	}
	r11, c11 := d.startGlobal(t, "a")
	d.answerScript(r11, c11, allow) // a new take: holds 9
	for _, rc := range pending {
		d.answerScript(rc[0], rc[1], deny) // the global rule denies: refunds
	}
	taken0, _ := d.host.GetCounterMetric("ratelimit_lease_taken_total;rule=L")
	spent := 0
	for range 40 {
		r, c := d.startGlobal(t, "a")
		d.answerScript(r, c, allow)
		if tk, _ := d.host.GetCounterMetric("ratelimit_lease_taken_total;rule=L"); tk != taken0 {
			break
		}
		spent++
	}
	require.LessOrEqual(t, spent, 9, "one take served more requests than batch - cost")
}
