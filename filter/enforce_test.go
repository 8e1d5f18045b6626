package filter

import (
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestEnforcePercentWithoutRequestID checks the fallback for requests without an
// x-request-id: the worker's sequence enforces the share it is configured with, spread over
// the requests, not in a run. Of 1,000 requests over a spent limit at 30%, within 1% of 300
// are denied, and each run of 20 has between 4 and 8 denials.
func TestEnforcePercentWithoutRequestID(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"r","enforce_percent":30,"algorithm":"fixed_window","limit":1,"window":"1h"}]}`)
	require.Equal(t, 0, d.Do(t, t0, step{}).Status)
	denied, inRun := 0, 0
	for i := 1; i <= 1000; i++ {
		if d.Do(t, t0.Add(time.Millisecond), step{}).Status == 429 {
			denied++
			inRun++
		}
		if i%20 == 0 {
			require.True(t, inRun >= 4 && inRun <= 8, "requests %d to %d: %d denials", i-19, i, inRun)
			inRun = 0
		}
	}
	require.InDelta(t, 300, denied, 10)
	require.Equal(t, uint64(1000-denied), counterNative(d, "ratelimit_requests_total;rule=r;decision=shadow_denied"))
}

// TestEnforcePercentEdges checks the edges: 0% enforces no request, 100% every one, with an
// x-request-id or without.
func TestEnforcePercentEdges(t *testing.T) {
	for _, tc := range []struct {
		percent string
		want    int // the status of a request over the limit
	}{{"0", 0}, {"100", 429}} {
		t.Run(tc.percent, func(t *testing.T) {
			d := newNative(t, `{"rules":[{"name":"r","enforce_percent":`+tc.percent+`,"algorithm":"fixed_window","limit":1,"window":"1h"}]}`)
			require.Equal(t, 0, d.Do(t, t0, step{}).Status)
			for _, id := range []string{"", "a", "f", "c"} {
				s := step{}
				if id != "" {
					s.Headers = [][2]string{hdr("x-request-id", id)}
				}
				require.Equal(t, tc.want, d.Do(t, t0, s).Status, id)
			}
		})
	}
}

// TestEnforcePercentGlobalNative checks a global rule's unenforced denials against a real
// Redis: a denial on a request outside the share lets the request through as a shadow rule's
// would, and the request's other global rule, decided in the same call, is charged for it; an
// enforced denial charges that rule nothing. Samples as in filtertest.MetricScenarios: "e" and
// "f" are inside 50%, "a" and "b" outside.
func TestEnforcePercentGlobalNative(t *testing.T) {
	srv := redistest.Start(t)
	filtertest.WaitForHourWindow(t, srv)
	d := newNative(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, `[
		{"name":"g","continue":true,"enforce_percent":50,"algorithm":"fixed_window","limit":1,"window":"1h","scope":"global"},
		{"name":"route","algorithm":"fixed_window","limit":100,"window":"1h","scope":"global"}]`))
	for i, s := range []struct {
		id        string
		status    int
		routeLeft string
	}{{"e", 0, "99"}, {"a", 0, "98"}, {"f", 429, ""}, {"b", 0, "97"}} {
		got := d.doRelayed(t, srv.WebdisURL(), hdr("x-request-id", s.id))
		require.Equal(t, s.status, got.Status, "request %d (%s)", i, s.id)
		if s.status == 0 {
			require.Contains(t, got.Headers["ratelimit"], `"route";r=`+s.routeLeft+`;`, "request %d (%s)", i, s.id)
		}
	}
	require.Equal(t, uint64(2), counterNative(d, "ratelimit_requests_total;rule=g;decision=shadow_denied"))
	require.Equal(t, uint64(1), counterNative(d, "ratelimit_requests_total;rule=g;decision=denied"))
}
