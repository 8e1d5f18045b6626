package filter

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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
	resp, err := http.Post(strings.TrimSuffix(url, "/")+"/", "application/x-www-form-urlencoded", bytes.NewReader(body))
	require.NoError(t, err)
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	l.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", fmt.Sprint(resp.StatusCode)}}, nil, answer)
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
		`{"name":"a","scope":"global","algorithm":"token_bucket","limit":5,"window":"1h","lease":{"batch":100,"ttl":"1s"}}]`
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4}, rules), 1, 1)
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
