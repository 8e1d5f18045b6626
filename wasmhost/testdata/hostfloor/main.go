// Command hostfloor is a test guest that makes, per request, exactly the host calls the rate
// limiter makes for one local rule keyed on the client IP and a header (the request of the
// GuestPerRequest benchmarks), and computes nothing else: it reads the whole request header
// map, the source.address property and the wall clock, reads and writes one shared-data slot
// with compare-and-swap, increments one counter, and adds two response headers. Benchmarks
// load it beside the pass-through module and the filter, so that the difference between
// pass-through and this floor is the cost of the host calls themselves (with the allocator
// calls they make into the guest), and the difference between the floor and the filter is the
// filter's own computation.
//
// It keeps one stream context and serves one stream at a time, which is all the benchmarks
// ask of it.
package main

import (
	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

type plugin struct {
	types.DefaultPluginContext
	allowed abi.MetricCounter
	stream  stream
}

// OnPluginStart defines the counter, as the filter defines its rules' counters at configure
// time.
func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	m, err := abi.DefineCounterMetric("ratelimit_requests_total;rule=r0;decision=allowed")
	if err != nil {
		return types.OnPluginStartStatusFailed
	}
	p.allowed, p.stream.plugin = m, p
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext { return &p.stream }

type stream struct {
	types.DefaultHttpContext
	plugin *plugin
}

// The names and values the filter's 1-rule request reads and writes, of the same sizes: a
// slot of the rule's key table, a 16-byte digest, a kind byte and a token bucket's state.
var (
	sourceAddress = []string{"source", "address"}
	slot          = "ratelimit|r0|10000.4242"
	policy        = []byte(`"r0";q=1000000000;w=1`)
	item          = []byte(`"r0";r=999999999;t=1`)
)

const valueSize = 16 + 1 + 33

// OnHttpRequestHeaders makes the request's host calls; their results are not used.
func (s *stream) OnHttpRequestHeaders(int, bool) types.Action {
	_, _ = abi.GetHttpRequestHeaderMap()
	_, _ = abi.GetPropertyString(sourceAddress)
	_ = abi.WallClockNanos()
	v, cas, err := abi.GetSharedData(slot)
	if err != nil || len(v) != valueSize {
		v, cas = make([]byte, valueSize), 0
	}
	v[valueSize-1]++
	_ = abi.SetSharedData(slot, v, cas)
	s.plugin.allowed.Increment(1)
	return types.ActionContinue
}

// OnHttpResponseHeaders adds the two rate-limit headers of an allowed request.
func (s *stream) OnHttpResponseHeaders(int, bool) types.Action {
	_ = abi.AddHttpResponseHeaderBytes("ratelimit-policy", policy)
	_ = abi.AddHttpResponseHeaderBytes("ratelimit", item)
	return types.ActionContinue
}

func init() { abi.SetVMContext(&vm{}) }

func main() {}
