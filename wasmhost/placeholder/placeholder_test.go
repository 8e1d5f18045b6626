package placeholder

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// These scenarios drive the placeholder through the SDK's proxytest emulator, natively. The
// wasmhost package runs the same scenarios against the compiled module.

func newHost(t *testing.T) proxytest.HostEmulator {
	t.Helper()
	opt := proxytest.NewEmulatorOption().
		WithVMContext(NewVMContext()).
		WithPluginConfiguration([]byte(`{"cluster":"upstream","authority":"example.test"}`))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	require.Equal(t, types.OnPluginStartStatusOK, host.StartPlugin())
	return host
}

func request(path string, extra ...[2]string) [][2]string {
	h := [][2]string{{":method", "GET"}, {":path", path}, {":authority", "example.test"}}
	return append(h, extra...)
}

func header(headers [][2]string, name string) (string, bool) {
	for _, kv := range headers {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

func TestCountsRequestsInSharedData(t *testing.T) {
	host := newHost(t)
	for want := 1; want <= 3; want++ {
		id := host.InitializeHttpContext()
		require.Equal(t, types.ActionContinue, host.CallOnRequestHeaders(id, request("/"), true))
		got, ok := header(host.GetCurrentRequestHeaders(id), "x-request-count")
		require.True(t, ok)
		require.Equal(t, itoa(want), got)
		require.Equal(t, types.ActionContinue, host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true))
		v, _ := header(host.GetCurrentResponseHeaders(id), "x-placeholder")
		require.Equal(t, "ok", v)
		host.CompleteHttpContext(id)
	}
	n, err := host.GetCounterMetric("placeholder_requests_total")
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
}

func TestDenySendsLocalResponse(t *testing.T) {
	host := newHost(t)
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, request("/deny"), true)
	resp := host.GetSentLocalResponse(id)
	require.NotNil(t, resp)
	require.EqualValues(t, 429, resp.StatusCode)
	require.Equal(t, "denied\n", string(resp.Data))
	v, _ := header(resp.Headers, "x-placeholder")
	require.Equal(t, "denied", v)
}

func TestCalloutPausesAndResumes(t *testing.T) {
	host := newHost(t)
	id := host.InitializeHttpContext()
	require.Equal(t, types.ActionPause, host.CallOnRequestHeaders(id, request("/callout"), true))
	callouts := host.GetCalloutAttributesFromContext(id)
	require.Len(t, callouts, 1)
	require.Equal(t, "upstream", callouts[0].Upstream)
	auth, _ := header(callouts[0].Headers, ":authority")
	require.Equal(t, "example.test", auth)

	host.CallOnHttpCallResponse(callouts[0].CalloutID, [][2]string{{":status", "204"}}, nil, nil)
	require.Equal(t, types.ActionContinue, host.GetCurrentHttpStreamAction(id))
	v, _ := header(host.GetCurrentRequestHeaders(id), "x-callout-status")
	require.Equal(t, "204", v)
}

func TestCalloutResetSends503(t *testing.T) {
	host := newHost(t)
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, request("/callout"), true)
	callouts := host.GetCalloutAttributesFromContext(id)
	require.Len(t, callouts, 1)
	host.CallOnHttpCallResponse(callouts[0].CalloutID, nil, nil, nil)
	resp := host.GetSentLocalResponse(id)
	require.NotNil(t, resp)
	require.EqualValues(t, 503, resp.StatusCode)
}

func TestTickCountsInSharedData(t *testing.T) {
	host := newHost(t)
	require.EqualValues(t, 100, host.GetTickPeriod())
	host.Tick()
	host.Tick()
	n, err := host.GetCounterMetric("placeholder_ticks_total")
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

func TestBadConfigurationIsRefused(t *testing.T) {
	opt := proxytest.NewEmulatorOption().
		WithVMContext(NewVMContext()).
		WithPluginConfiguration([]byte(`{"cluster":`))
	host, reset := proxytest.NewHostEmulator(opt)
	defer reset()
	require.Equal(t, types.OnPluginStartStatusFailed, host.StartPlugin())
}

func itoa(n int) string { return string(rune('0' + n)) }
