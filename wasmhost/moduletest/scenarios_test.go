package moduletest

import (
	"context"
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// The scenario types and helpers come from filtertest, which package filter's native tests
// share; these short names keep the tests readable.
type (
	step    = filtertest.Step
	outcome = filtertest.Outcome
	driver  = filtertest.Driver
)

var t0 = filtertest.T0

const ms = time.Millisecond

// hdr is shorthand for one request header.
func hdr(k, v string) [2]string { return [2]string{k, v} }

// wasmDriver runs the compiled filter (build/ratelimit.wasm, rebuilt by the test when stale)
// in the project's wazero host, which behaves like Envoy: several worker VMs, one shared-data
// store, requests spread round robin over the workers.
type wasmDriver struct {
	host *wasmhost.Host
	now  *atomic.Int64
}

// wasmOptions tunes a wasm driver; the zero value is two workers and a private store.
type wasmOptions struct {
	workers  int
	clusters map[string]string
	shared   *wasmhost.SharedData
	realTime bool
	// clock, when set, is the host's virtual clock (wasmhost.Options.VirtualClock): ticks,
	// callout timeouts and upstream delays follow it, and the driver's own clock is unused.
	clock *wasmhost.VirtualClock
}

func newWasm(t testing.TB, config string, o wasmOptions) *wasmDriver {
	t.Helper()
	if o.workers == 0 {
		o.workers = 2
	}
	if o.shared == nil {
		o.shared = wasmhost.NewSharedData()
	}
	d := &wasmDriver{now: new(atomic.Int64)}
	d.now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, d.now.Load()) }
	if o.realTime {
		clock = time.Now
	}
	if o.clock != nil {
		clock = nil
	}
	h, err := wasmhost.New(context.Background(), wasmtest.BuildModule(t), wasmhost.Options{
		Workers:      o.workers,
		VMID:         "ratelimit",
		PluginName:   "ratelimit",
		PluginConfig: []byte(config),
		Clusters:     o.clusters,
		Clock:        clock,
		VirtualClock: o.clock,
		SharedData:   o.shared,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	d.host = h
	return d
}

func (d *wasmDriver) request(s step) wasmhost.Request {
	method, path := s.Method, s.Path
	if method == "" {
		method = "GET"
	}
	if path == "" {
		path = "/"
	}
	return wasmhost.Request{
		Worker: -1, Method: method, Path: path, Authority: "example.test",
		Headers: s.Headers, RouteName: s.Route, VirtualHost: s.VHost, SourceAddress: s.SourceAddress(),
		Upstream: &wasmhost.UpstreamResponse{Status: 200},
	}
}

// Do runs s at the instant at (filtertest.Driver).
func (d *wasmDriver) Do(t *testing.T, at time.Time, s step) outcome {
	t.Helper()
	d.now.Store(at.UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := d.host.Do(ctx, d.request(s))
	require.NoError(t, err)
	return outcomeOf(res)
}

func outcomeOf(res *wasmhost.Result) outcome {
	state := map[string]string{}
	for k, v := range res.FilterState {
		state[k] = string(v)
	}
	if res.Local != nil {
		return outcome{Status: res.Local.Status, Headers: filtertest.HeaderMap(res.Local.Headers),
			Body: string(res.Local.Body), GrpcStatus: int(res.Local.GrpcStatus), FilterState: state}
	}
	return outcome{Headers: filtertest.HeaderMap(res.ResponseHeaders), Upstream: filtertest.HeaderMap(res.RequestHeaders),
		GrpcStatus: -1, FilterState: state}
}

func TestScenariosWasm(t *testing.T) {
	t.Parallel()
	for _, sc := range filtertest.Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			d := newWasm(t, sc.Config, wasmOptions{})
			filtertest.Run(t, d, sc)
			require.Zero(t, d.host.Stats().Traps, "the VM must never trap")
		})
	}
}
