package filter

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// TestLateBatchAfterTTLIsDropped: a reset request's call for y's lease batch (ttl 100 ms,
// redis.timeout 2 s) is answered only after the batch's ttl, counted from the call's send,
// has passed; meanwhile a later request took and holds a fresh batch on the same key. The
// late batch cannot be spent any more (a lease's units expire ttl after the call's send), so
// all ten units are counted as dropped at once, and the fresh lease is left alone: its nine
// units still admit the key's next requests with no call. Holding the expired batch instead
// would replace the live lease (dropping its nine units) with one that is already expired (its
// ten dropped at the next request), and the key's next request would take a third batch.
func TestLateBatchAfterTTLIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			l, url, y, dropped := newLateBatchFleet(t, srv, parts)

			id, calls := l.startReset(t, 0, hdr("x-k", "A"), hdr("x-y", "late"))
			l.now += int64(50 * time.Millisecond)
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
			require.True(t, ok)
			fresh := y.lease.held[yKey]
			require.NotNil(t, fresh)
			require.EqualValues(t, 9, fresh.units, "the later request's batch, its own unit spent")

			l.now += int64(60 * time.Millisecond) // 110 ms after the reset request's call
			for _, c := range calls {
				l.answerAt(t, url, c)
			}
			l.host.CompleteHttpContext(id)
			require.Same(t, fresh, y.lease.held[yKey], "the live lease is kept")
			require.EqualValues(t, 9, fresh.units)
			require.EqualValues(t, 10, dropped(), "the expired late batch is dropped, all of it, at once")

			requireNextSpendsLiveLease(t, l, srv, fresh)
			require.EqualValues(t, 10, dropped(), "nothing more is dropped")
		})
	}
}

// TestSlowBatchAfterTTLIsDropped is TestLateBatchAfterTTLIsDropped for a request that still
// waits: its call for y's batch is answered after the batch's ttl has passed, while a later
// request holds a fresh batch on the key. The request is admitted (it spends its own unit of
// the batch, which Redis committed), and the other nine units, already expired, are dropped at
// once; the live lease is kept and admits the key's next request with no call.
func TestSlowBatchAfterTTLIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			l, url, y, dropped := newLateBatchFleet(t, srv, parts)

			l.cur = 0
			id := l.host.InitializeHttpContext()
			action := l.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, hdr("x-k", "A"), hdr("x-y", "late")}, true)
			require.Equal(t, types.ActionPause, action)
			calls := l.host.GetCalloutAttributesFromContext(id)
			l.now += int64(50 * time.Millisecond)
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
			require.True(t, ok)
			fresh := y.lease.held[yKey]
			require.NotNil(t, fresh)
			require.EqualValues(t, 9, fresh.units)

			l.now += int64(60 * time.Millisecond) // 110 ms after the slow request's call
			for _, c := range calls {
				l.answerAt(t, url, c)
			}
			require.Equal(t, types.ActionContinue, l.host.GetCurrentHttpStreamAction(id), "the slow request is admitted")
			l.host.CompleteHttpContext(id)
			require.Same(t, fresh, y.lease.held[yKey], "the live lease is kept")
			require.EqualValues(t, 9, fresh.units)
			require.EqualValues(t, 9, dropped(), "the expired batch's nine other units are dropped at once")

			requireNextSpendsLiveLease(t, l, srv, fresh)
			require.EqualValues(t, 9, dropped(), "nothing more is dropped")
		})
	}
}

// lateBatchRules are the two global rules of the late-batch tests: x, which every request
// passes (continue), and y, whose key "late" takes lease batches of ten units that expire 100
// ms after their call is sent.
const lateBatchRules = `[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":1000,"window":"1h"},` +
	`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h","lease":{"batch":10,"ttl":"100ms"}}]`

// newLateBatchFleet starts one VM on lateBatchRules against srv with parts partitions, and
// returns it with webdis's URL, rule y and a reader of y's dropped-units counter.
func newLateBatchFleet(t *testing.T, srv *redistest.Server, parts int) (*leaseVMs, string, *ruleState, func() uint64) {
	t.Helper()
	loadScripts(srv)
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts}, lateBatchRules), 1, 1)
	y := l.vms[0].rules[1]
	require.Equal(t, "y", y.rule.Name)
	dropped := func() uint64 {
		n, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
		require.NoError(t, err)
		return n
	}
	return l, srv.WebdisURL(), y, dropped
}

// requireNextSpendsLiveLease checks the closing promise of the late-batch tests: after the
// late answer, the key's next request is admitted from the live lease fresh with no call to
// Redis (y's stored tokens do not move), and the lease has one unit less.
func requireNextSpendsLiveLease(t *testing.T, l *leaseVMs, srv *redistest.Server, fresh *heldLease) {
	t.Helper()
	before := yTokens(t, srv, "late")
	units := fresh.units
	l.now += int64(time.Millisecond)
	ok, _ := l.doRelayed(t, 0, srv.WebdisURL(), hdr("x-k", "C"), hdr("x-y", "late"))
	require.True(t, ok)
	require.Equal(t, before, yTokens(t, srv, "late"), "the next request spends the live lease")
	require.EqualValues(t, units-1, fresh.units)
}
