package moduletest

import (
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// The abi dispatcher keeps the stream created last outside its map and moves it into the map
// only when another stream is created while it is open. Here one worker holds several streams
// open at once (a shaping rule queues them): every one of them must still reach its
// response-side callback when it is released (its rate-limit headers show it), and the worker
// must go on serving new streams afterwards.
func TestOverlappingStreamsOnOneWorker(t *testing.T) {
	t.Parallel()
	const k = 5
	h, clock := virtualHost(t, shapeConfig("burst", 20, k, time.Second), 1, nil)
	flights := sendQueuedOneByOne(t, h, "burst", k, 1)
	clock.Advance(time.Second)
	for i, f := range flights {
		r := f.wait(t)[0]
		require.Truef(t, r.Continued && r.Local == nil, "request %d: %+v", i, r.Local)
		require.NotEmptyf(t, r.Header("ratelimit"), "request %d: no rate-limit headers: %v", i, r.ResponseHeaders)
	}
	clock.Advance(time.Second)
	r := send(h, []wasmhost.Request{{Method: "GET", Path: "/", Authority: "example.test",
		Upstream: &wasmhost.UpstreamResponse{Status: 200}}}).wait(t)[0]
	require.True(t, r.Continued)
	require.NotEmpty(t, r.Header("ratelimit"))
	require.Zero(t, h.Stats().Traps)
	requireNoGuestErrors(t, h)
}
