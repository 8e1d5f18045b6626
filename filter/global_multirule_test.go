package filter

import (
	"fmt"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// A request denied by any rule is charged nothing on the others, for global rules and for
// local and global rules mixed, natively under the SDK's emulator with a real webdis and
// redis-server: the native driver relays the filter's callout to webdis over HTTP and hands the
// answer back, so it sees exactly what Redis decided. wasmhost/moduletest runs the
// same cases (filtertest.MultiRuleCases) against the compiled module.

func TestGlobalNativeDeniedRequestChargesNothing(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range filtertest.MultiRuleCases {
		t.Run(tc.Name, func(t *testing.T) {
			srv.MustDo("FLUSHALL")
			filtertest.WaitForHourWindow(t, srv)
			d := newNative(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, tc.Rules))
			tc.Run(t, func(key string) outcome {
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
	action := d.host.CallOnRequestHeaders(id, step{Headers: headers}.RequestHeaders(), true)
	for answered := 0; action == types.ActionPause && d.host.GetSentLocalResponse(id) == nil; answered++ {
		callouts := d.host.GetCalloutAttributesFromContext(id)
		require.Greater(t, len(callouts), answered, "paused without a callout")
		c := callouts[answered]
		status, body, err := redistest.Post(url, c.Body)
		require.NoError(t, err)
		d.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", fmt.Sprint(status)}}, nil, body)
		action = d.host.GetCurrentHttpStreamAction(id)
	}
	if resp := d.host.GetSentLocalResponse(id); resp != nil {
		return outcome{Status: int(resp.StatusCode), Headers: filtertest.HeaderMap(resp.Headers), Body: string(resp.Data)}
	}
	require.Equal(t, types.ActionContinue, action)
	d.host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
	return outcome{Headers: filtertest.HeaderMap(d.host.GetCurrentResponseHeaders(id))}
}

// A request that several global rules deny states the longest wait among the enforced ones
// (filtertest.CheckLongestWait); moduletest runs the same case against the compiled module.
func TestGlobalNativeDenialStatesTheLongestWait(t *testing.T) {
	srv := redistest.Start(t)
	d := newNative(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, filtertest.LongestWaitRules))
	filtertest.CheckLongestWait(t, func() outcome { return d.doRelayed(t, srv.WebdisURL()) })
}
