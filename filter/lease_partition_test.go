package filter

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
)

// Leased global rules with redis.partitions > 1 (one call per rule), with the test choosing
// when each call's answer arrives: natively, against a real redis-server and webdis, on the
// fake clock of newGlobalFleet.

// answerAt relays callout c to webdis at url with the fleet's fake clock (Redis decides at
// that instant, see doRelayed) and delivers the answer to the filter.
func (l *leaseVMs) answerAt(t *testing.T, url string, c proxytest.HttpCalloutAttribute) {
	t.Helper()
	body := append(bytes.Clone(c.Body), '/')
	body = strconv.AppendInt(body, l.now/1e9, 10)
	body = append(body, '/')
	body = strconv.AppendInt(body, l.now%1e9, 10)
	status, answer, err := redistest.Post(url, body)
	require.NoError(t, err)
	l.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", fmt.Sprint(status)}}, nil, answer)
}

// deniedThenLate makes a request with headers on the current VM, whose rules x and y each
// have a call: x's answer arrives first and denies the request at once, y's arrives 1 ms
// later, after the request stopped waiting.
func (l *leaseVMs) deniedThenLate(t *testing.T, url string, headers ...[2]string) {
	t.Helper()
	id := l.host.InitializeHttpContext()
	defer l.host.CompleteHttpContext(id)
	l.host.CallOnRequestHeaders(id, append([][2]string{{":method", "GET"}, {":path", "/"}}, headers...), true)
	out := l.host.GetCalloutAttributesFromContext(id)
	require.Len(t, out, 2, "one call per rule")
	l.answerAt(t, url, out[0])
	resp := l.host.GetSentLocalResponse(id)
	require.NotNil(t, resp, "x denies the request at once")
	require.Contains(t, string(resp.Data), `"rule":"x"`)
	l.now += int64(time.Millisecond)
	l.answerAt(t, url, out[1])
}

// loadScripts empties srv and loads the scripts, so that no call of the test is answered
// NOSCRIPT (which would add a resend the test does not expect).
func loadScripts(srv *redistest.Server) {
	srv.MustDo("FLUSHALL")
	for _, s := range redis.Scripts() {
		srv.MustDo("SCRIPT", "LOAD", s.Source)
	}
}

// TestPartitionedResendKeepsOtherRulesSentAt: with partitions, rule b's call and rule a's call
// leave at t0; a's batch is denied at t0+3ms and a's call is sent again then, with the
// request's own cost; b's answer (a committed batch) arrives at t0+7ms. b's latency sample is
// 7 ms, measured from b's own send, not 4 ms from a's resend; and b's lease expires ttl after
// t0, not after the resend (which would hold b's units past what Redis debited them for).
//
// The rule order matters to the SDK's emulator only: it numbers a callout by how many are
// unanswered, so a's call (the second) is answered first and its resend takes its number
// again, while b's call keeps its own.
func TestPartitionedResendKeepsOtherRulesSentAt(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	rules := `[{"name":"b","scope":"global","continue":true,"algorithm":"token_bucket","limit":1000,"window":"1h","lease":{"batch":10,"ttl":"1s"}},` +
		`{"name":"a","scope":"global","algorithm":"token_bucket","limit":16,"window":"1h","lease":{"batch":100,"ttl":"1s"}}]`
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4}, rules), 1, 1)
	// Another proxy, whose rule a has no lease, leaves 2 of a's 16: a's first take on VM 0
	// (1 + 16/8) is denied.
	other := l.addVM(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4},
		`[{"name":"a","scope":"global","algorithm":"token_bucket","limit":16,"window":"1h"}]`))
	for range 14 {
		ok, _ := l.doRelayed(t, other, srv.WebdisURL())
		require.True(t, ok)
	}
	l.cur = 0
	t0 := l.now
	id := l.host.InitializeHttpContext()
	defer l.host.CompleteHttpContext(id)
	l.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}}, true)
	calls := l.host.GetCalloutAttributesFromContext(id)
	require.Len(t, calls, 2, "one call per rule")
	require.Contains(t, string(calls[0].Body), "%7Brl%3Ab%3A", "b's call first") // {rl:b:
	require.Contains(t, string(calls[1].Body), "%7Brl%3Aa%3A")

	l.now = t0 + int64(3*time.Millisecond)
	l.answerAt(t, srv.WebdisURL(), calls[1])
	calls = l.host.GetCalloutAttributesFromContext(id)
	require.Len(t, calls, 3, "a's denied batch is sent again with the request's cost")
	require.NotEqual(t, calls[0].CalloutID, calls[2].CalloutID)
	require.Nil(t, l.host.GetSentLocalResponse(id))

	l.now = t0 + int64(7*time.Millisecond)
	l.answerAt(t, srv.WebdisURL(), calls[0])
	us, err := l.host.GetHistogramMetric("ratelimit_redis_latency_us")
	require.NoError(t, err)
	require.EqualValues(t, 7000, us, "b's latency from b's own send")
	b := l.vms[0].rules[0]
	require.Equal(t, "b", b.rule.Name)
	held := b.lease.held[""]
	require.NotNil(t, held, "b's committed batch is held")
	require.EqualValues(t, 9, held.units)
	require.Equal(t, t0+int64(time.Second), held.expires, "b's lease expires ttl after b's own send")

	l.now = t0 + int64(8*time.Millisecond)
	l.answerAt(t, srv.WebdisURL(), calls[2])
	require.Nil(t, l.host.GetSentLocalResponse(id), "both rules admit the request")
	us, err = l.host.GetHistogramMetric("ratelimit_redis_latency_us")
	require.NoError(t, err)
	require.EqualValues(t, 5000, us, "a's resend's latency from the resend")
}

// TestPartitionedLateBatchIsHeld: with partitions, rule x denies the request while rule y's
// call, which asked Redis for a lease batch, is still out; y's answer then arrives, and the
// batch Redis committed for it is held as this VM's lease (all of it: the denied request spent
// none), not lost uncounted. The key's next request is admitted for y from that lease, with
// no call for y.
func TestPartitionedLateBatchIsHeld(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	rules := `[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":1,"window":"1h"},` +
		`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h","lease":{"batch":10,"ttl":"1s"}}]`
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4}, rules), 1, 1)
	url := srv.WebdisURL()
	ok, calls := l.doRelayed(t, 0, url, hdr("x-k", "A"), hdr("x-y", "first"))
	require.True(t, ok)
	require.Equal(t, 2, calls, "one call per rule")

	// x's answer (a denial: A has used its one request) arrives first, y's after it.
	l.deniedThenLate(t, url, hdr("x-k", "A"), hdr("x-y", "late"))
	keys := srv.MustDo("KEYS", "rl:{rl:y:*}:*:late")
	require.Len(t, keys, 1)
	// The token bucket keeps its tokens in nanoseconds of refill (3.6 s a token at 1000 an
	// hour): 990 are left, so Redis debited y's batch of 10 for the denied request.
	require.Equal(t, fmt.Sprint(990*int64(3600*time.Millisecond)), srv.MustDo("HGET", fmt.Sprint(keys.([]any)[0]), "t"))

	// The batch is this VM's lease on "late": the next ten requests cost no call for y.
	for i := range 10 {
		ok, calls = l.doRelayed(t, 0, url, hdr("x-k", fmt.Sprint("B", i)), hdr("x-y", "late"))
		require.True(t, ok)
		require.Equal(t, 1, calls, "request %d: x's call only; y spends the held batch", i)
	}
	ok, calls = l.doRelayed(t, 0, url, hdr("x-k", "C"), hdr("x-y", "late"))
	require.True(t, ok)
	require.Equal(t, 2, calls, "the batch is spent: y asks Redis again")
	dropped, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
	require.NoError(t, err)
	require.Zero(t, dropped)
}

// TestPartitionedLateBatchOnOverflowIsDropped: a late batch (as in
// TestPartitionedLateBatchIsHeld) that Redis decided on the rule's overflow key, its partition
// being full, gives the VM no lease; the whole batch, the denied request's cost included, is
// counted as dropped.
func TestPartitionedLateBatchOnOverflowIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	rules := `[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":1,"window":"1h"},` +
		`{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"token_bucket","limit":1000,"window":"1h","max_keys":4,"lease":{"batch":10,"ttl":"1m"}}]`
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4}, rules), 1, 1)
	url := srv.WebdisURL()
	// One live key per partition (max_keys 4 over 4 partitions): twenty keys fill them all.
	for i := range 20 {
		ok, _ := l.doRelayed(t, 0, url, hdr("x-k", fmt.Sprint("fill", i)), hdr("x-y", fmt.Sprint("fill", i)))
		require.True(t, ok)
	}
	ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "A"), hdr("x-y", "fill0"))
	require.True(t, ok)
	dropped := func() uint64 {
		n, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "y"))
		require.NoError(t, err)
		return n
	}
	overflows := func() uint64 {
		n, _ := l.host.GetCounterMetric(statName("ratelimit_key_overflow_total", "y"))
		return n
	}
	before, overflowed := dropped(), overflows()
	require.Positive(t, overflowed, "the fills overflowed: every partition is full")

	l.deniedThenLate(t, url, hdr("x-k", "A"), hdr("x-y", "late"))
	require.Equal(t, overflowed, overflows(), "a late answer is not counted as the rule's decision")
	require.EqualValues(t, 1, dropped()-before, "the overflow key debited the request's own unit only, which nobody spent")
	ok, calls := l.doRelayed(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
	require.True(t, ok)
	require.Equal(t, 2, calls, "no lease was held: y asks Redis")
}

// TestPartitionedLeaseGivesBack: with partitions, a leased global rule's unspent units go back
// in the key's next take, as its rule's own call carries them, and Redis's answer saying it
// applied them is a good answer (no failure, no malformed reply). Each unit is given back
// exactly once, as the fixed window's count in Redis shows: by the next take's first call,
// which writes the give-back even when it denies the lease's batch (so the resend for the
// request's cost carries none), or by the resend of the full script after NOSCRIPT (the
// EVALSHA ran nothing, so the resend carries them).
func TestPartitionedLeaseGivesBack(t *testing.T) {
	for _, tc := range []struct {
		name          string
		spent         int  // requests the first take's lease admits (the first included)
		others        int  // requests another proxy, without a lease, makes after them
		flush         bool // Redis loses the script before the next take
		calls         int  // the next take's calls
		returned, cnt int  // units counted returned, and the window's count after the next take
	}{
		// 10 taken, 3 spent, 7 given back; the next take is 1 + 3 (the reserve the 3 spent
		// within the ttl call for): 10 - 7 + 4.
		{name: "given back", spent: 3, calls: 1, returned: 7, cnt: 7},
		{name: "NOSCRIPT", spent: 3, flush: true, calls: 2, returned: 7, cnt: 7},
		// 10 taken, 9 spent, 1 given back; the other proxy fills the window (100); the next
		// take's batch of 10 finds 1 unit after the give-back and is denied, and the request's
		// own unit is then taken: 100 - 1 + 1.
		{name: "batch denied", spent: 9, others: 90, calls: 2, returned: 1, cnt: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			loadScripts(srv)
			rule := `[{"name":"hot","scope":"global","algorithm":"fixed_window","limit":100,"window":"1h"`
			l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4}, rule+`,"lease":{"batch":10,"ttl":"1s"}}]`), 1, 1)
			other := l.addVM(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4}, rule+`}]`))
			url := srv.WebdisURL()
			for i := range tc.spent {
				ok, calls := l.doRelayed(t, 0, url)
				require.True(t, ok)
				require.Equal(t, 1-min(i, 1), calls, "the first request takes the lease, the others spend it")
			}
			for range tc.others {
				ok, _ := l.doRelayed(t, other, url)
				require.True(t, ok)
			}
			if tc.flush {
				srv.MustDo("SCRIPT", "FLUSH")
			}
			l.now += int64(2 * time.Second)
			ok, calls := l.doRelayed(t, 0, url)
			noRedisFailures(t, l)
			require.True(t, ok)
			require.Equal(t, tc.calls, calls)
			returned, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_returned_total", "hot"))
			require.NoError(t, err)
			require.EqualValues(t, tc.returned, returned)
			dropped, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_dropped_total", "hot"))
			require.NoError(t, err)
			require.Zero(t, dropped)
			keys, _ := srv.MustDo("KEYS", "rl:{rl:hot:*}:").([]any)
			require.Len(t, keys, 1)
			require.Equal(t, fmt.Sprint(tc.cnt), srv.MustDo("HGET", fmt.Sprint(keys[0]), "c"), "the window's count")
		})
	}
}

// noRedisFailures checks that no call of the fleet failed: no malformed answer, no error reply,
// no timeout.
func noRedisFailures(t *testing.T, l *leaseVMs) {
	t.Helper()
	for _, m := range []string{"ratelimit_redis_malformed_total", "ratelimit_redis_errors_total", "ratelimit_redis_timeouts_total"} {
		n, err := l.host.GetCounterMetric(m)
		require.NoError(t, err)
		require.Zero(t, n, m)
	}
}

// TestPartitionedLateAnswerGivesBack: with partitions, rule x denies the request while rule
// y's call, which carries the units y's expired lease did not spend back to the key, is still
// out; y's answer then arrives, is a good answer, and its give-back is counted as returned.
func TestPartitionedLateAnswerGivesBack(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	rules := `[{"name":"x","scope":"global","continue":true,"key":[{"source":"header","name":"x-k"}],"algorithm":"fixed_window","limit":1,"window":"1h"},` +
		`{"name":"y","scope":"global","algorithm":"fixed_window","limit":100,"window":"1h","lease":{"batch":10,"ttl":"1s"}}]`
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4}, rules), 1, 1)
	url := srv.WebdisURL()
	ok, calls := l.doRelayed(t, 0, url, hdr("x-k", "A"))
	require.True(t, ok)
	require.Equal(t, 2, calls, "one call per rule; y takes 10 and spends 1")

	l.now += int64(2 * time.Second)
	l.deniedThenLate(t, url, hdr("x-k", "A"))
	noRedisFailures(t, l)
	returned, err := l.host.GetCounterMetric(statName("ratelimit_lease_units_returned_total", "y"))
	require.NoError(t, err)
	require.EqualValues(t, 9, returned, "10 taken, 1 spent")
	// y's late take is 1 + 1 (the reserve the 1 spent calls for): 10 - 9 + 2.
	keys, _ := srv.MustDo("KEYS", "rl:{rl:y:*}:").([]any)
	require.Len(t, keys, 1)
	require.Equal(t, "3", srv.MustDo("HGET", fmt.Sprint(keys[0]), "c"), "the window's count")
}
