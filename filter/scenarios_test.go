package filter

import (
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The scenario types and helpers come from filtertest, which wasmhost/moduletest's tests of
// the compiled module share; these short names keep the native tests readable.
type (
	step    = filtertest.Step
	outcome = filtertest.Outcome
	driver  = filtertest.Driver
)

var t0 = filtertest.T0

const ms = time.Millisecond

// hdr is shorthand for one request header.
func hdr(k, v string) [2]string { return [2]string{k, v} }

// nativeDriver runs the filter in-process under the SDK's proxytest emulator.
type nativeDriver struct {
	host proxytest.HostEmulator
	now  *time.Time
}

// newNative starts the filter with config under the emulator. The emulator holds a global lock
// while it exists, so native scenarios never run in parallel.
func newNative(t *testing.T, config string) *nativeDriver {
	t.Helper()
	d := &nativeDriver{now: new(time.Time)}
	*d.now = t0
	opt := proxytest.NewEmulatorOption().
		WithVMContext(NewVMContext(WithClock(func() int64 { return d.now.UnixNano() }))).
		WithPluginConfiguration([]byte(config))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	require.Equal(t, types.OnPluginStartStatusOK, host.StartPlugin(), "configure: %v", host.GetCriticalLogs())
	d.host = host
	return d
}

// Do runs s at the instant at under the emulator (filtertest.Driver).
func (d *nativeDriver) Do(t *testing.T, at time.Time, s step) outcome {
	t.Helper()
	*d.now = at
	// The emulator refuses empty property values and cannot unset one, so an absent route or
	// virtual host is given a name no scenario matches.
	require.NoError(t, d.host.SetProperty([]string{"xds", "route_name"}, []byte(orNone(s.Route))))
	require.NoError(t, d.host.SetProperty([]string{"xds", "virtual_host_name"}, []byte(orNone(s.VHost))))
	require.NoError(t, d.host.SetProperty([]string{"source", "address"}, []byte(s.SourceAddress())))
	id := d.host.InitializeHttpContext()
	action := d.host.CallOnRequestHeaders(id, s.RequestHeaders(), true)
	defer d.host.CompleteHttpContext(id)
	if resp := d.host.GetSentLocalResponse(id); resp != nil {
		return outcome{Status: int(resp.StatusCode), Headers: filtertest.HeaderMap(resp.Headers),
			Body: string(resp.Data), GrpcStatus: int(resp.GRPCStatus), FilterState: filterStateNative(d.host, s.WantFilterState)}
	}
	require.Equal(t, types.ActionContinue, action, "request paused without a local response")
	state := filterStateNative(d.host, s.WantFilterState)
	upstream := filtertest.HeaderMap(d.host.GetCurrentRequestHeaders(id))
	d.host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
	return outcome{Headers: filtertest.HeaderMap(d.host.GetCurrentResponseHeaders(id)), Upstream: upstream, GrpcStatus: -1,
		FilterState: state}
}

func TestScenariosNative(t *testing.T) {
	for _, sc := range filtertest.Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			filtertest.Run(t, newNative(t, sc.Config), sc)
		})
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// filterStateNative reads the properties named in want from the emulator. The emulator keeps
// one set of properties for every stream and cannot unset one, so a step can only ask for
// values the filter sets on that step.
func filterStateNative(host proxytest.HostEmulator, want map[string]string) map[string]string {
	state := map[string]string{}
	for name := range want {
		if v, err := host.GetProperty([]string{name}); err == nil {
			state[name] = string(v)
		}
	}
	return state
}
