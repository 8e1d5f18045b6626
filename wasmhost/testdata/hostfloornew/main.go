// Command hostfloornew is the host-call floor of a new client (see wasmhost/testdata/hostfloor):
// a test guest that makes, per request, exactly the host calls the rate limiter makes for a
// client its one local rule has not seen (BenchmarkGuestPerRequest's 1rule-new-client), on
// shared-data entries that differ per client like the filter's, and computes nothing else: it
// reads the whole request header map, the source.address property and the wall clock, reads
// the client's slot (not found) and its group's 256-byte index, writes the index and the slot,
// increments two counters (the rule's allowed requests and its used slots) and adds two
// response headers. Benchmarks load it beside hostfloor and the filter, so that the
// difference between the two floors is what a new client's extra host calls cost (a host's
// map lookups of entries not seen before included), and the difference between this floor and
// the filter's new-client case is the filter's own computation.
package main

import (
	"strconv"
	"unsafe"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

type plugin struct {
	types.DefaultPluginContext
	allowed, used abi.MetricCounter
	stream        stream
}

// OnPluginStart defines the counters, as the filter defines its rules' counters at configure
// time.
func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	var err1, err2 error
	p.allowed, err1 = abi.DefineCounterMetric("ratelimit_requests_total;rule=r0;decision=allowed")
	p.used, err2 = abi.DefineCounterMetric("ratelimit_key_slots_used;rule=r0")
	if err1 != nil || err2 != nil {
		return types.OnPluginStartStatusFailed
	}
	p.stream.plugin = p
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext { return &p.stream }

type stream struct {
	types.DefaultHttpContext
	plugin *plugin
	name   []byte
	value  [valueSize]byte
}

// The names and values the filter's new-client request reads and writes, of the same sizes:
// a slot of the rule's key table (16-byte digest, kind byte, token bucket state) and the
// index of one of its 313 groups of 32 slots.
var (
	sourceAddress = []string{"source", "address"}
	policy        = []byte(`"r0";q=1000000000;w=1`)
	item          = []byte(`"r0";r=999999999;t=1`)
)

const (
	valueSize = 16 + 1 + 33
	indexSize = 32 * 8
	groups    = 313
)

// OnHttpRequestHeaders makes the request's host calls; their results are not used.
func (s *stream) OnHttpRequestHeaders(int, bool) types.Action {
	_, _ = abi.GetHttpRequestHeaderMap()
	addr, _ := abi.GetPropertyString(sourceAddress)
	_ = abi.WallClockNanos()
	// The client's slot is named after its address, its group by a hash of the address: each
	// client's own slot, groups shared by many clients, as in the filter's table.
	_, _, _ = abi.GetSharedData(s.slotName(addr))
	h := 0
	for i := 0; i < len(addr); i++ {
		h = h*31 + int(addr[i])
	}
	s.name = strconv.AppendInt(append(s.name[:0], "ratelimit|r0|10000#"...), int64(h&0xffff%groups), 10)
	index := unsafe.String(unsafe.SliceData(s.name), len(s.name))
	ix, cas, err := abi.GetSharedData(index)
	if err != nil || len(ix) != indexSize {
		ix, cas = make([]byte, indexSize), 0
	}
	ix[h&0xffff%indexSize]++
	_ = abi.SetSharedData(index, ix, cas)
	_ = abi.SetSharedData(s.slotName(addr), s.value[:], 0)
	s.plugin.allowed.Increment(1)
	s.plugin.used.Increment(1)
	return types.ActionContinue
}

// slotName returns the name of the client's slot in the stream's buffer (valid until the next
// name is built), as the filter builds its names without allocating.
func (s *stream) slotName(addr string) string {
	s.name = append(append(s.name[:0], "ratelimit|r0|10000."...), addr...)
	return unsafe.String(unsafe.SliceData(s.name), len(s.name))
}

// OnHttpResponseHeaders adds the two rate-limit headers of an allowed request.
func (s *stream) OnHttpResponseHeaders(int, bool) types.Action {
	_ = abi.AddHttpResponseHeaderBytes("ratelimit-policy", policy)
	_ = abi.AddHttpResponseHeaderBytes("ratelimit", item)
	return types.ActionContinue
}

func init() { abi.SetVMContext(&vm{}) }

func main() {}
