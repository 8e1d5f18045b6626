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
// With the plugin configuration {"new_client":true} it makes instead the host calls of a
// client the rule has not seen (the 1rule-new-client case), on shared-data entries that
// differ per client like the filter's: it reads the client's slot (not found) and its group's
// 256-byte index, writes the index and the slot, and increments two counters (the rule's
// allowed requests and its used slots).
//
// It keeps one stream context and serves one stream at a time, which is all the benchmarks
// ask of it.
package main

import (
	"bytes"
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
	newClient     bool
	stream        stream
}

// OnPluginStart defines the counters, as the filter defines its rules' counters at configure
// time, and reads which request to imitate.
func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	m, err := abi.DefineCounterMetric("ratelimit_requests_total;rule=r0;decision=allowed")
	if err != nil {
		return types.OnPluginStartStatusFailed
	}
	p.allowed, p.stream.plugin = m, p
	if cfg, _ := abi.GetPluginConfiguration(); bytes.Contains(cfg, []byte(`"new_client":true`)) {
		if p.used, err = abi.DefineCounterMetric("ratelimit_key_slots_used;rule=r0"); err != nil {
			return types.OnPluginStartStatusFailed
		}
		p.newClient = true
	}
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext { return &p.stream }

type stream struct {
	types.DefaultHttpContext
	plugin *plugin
	name   []byte
	value  [valueSize]byte
}

// The names and values the filter's 1-rule request reads and writes, of the same sizes: a
// slot of the rule's key table (a 16-byte digest, a kind byte and a token bucket's state) and
// the index of one of its 313 groups of 32 slots.
var (
	sourceAddress = []string{"source", "address"}
	slot          = "ratelimit|r0|10000.4242"
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
	if s.plugin.newClient {
		s.newClient(addr)
		return types.ActionContinue
	}
	v, cas, err := abi.GetSharedData(slot)
	if err != nil || len(v) != valueSize {
		v, cas = make([]byte, valueSize), 0
	}
	v[valueSize-1]++
	_ = abi.SetSharedData(slot, v, cas)
	s.plugin.allowed.Increment(1)
	return types.ActionContinue
}

// newClient makes a new client's shared-data calls and counter increments. The client's slot
// is named after its address, its group by a hash of the address: each client's own slot,
// groups shared by many clients, as in the filter's table.
func (s *stream) newClient(addr string) {
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
