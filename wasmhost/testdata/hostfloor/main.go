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
// With the plugin configuration {"per_client":true} it gives each client a shared-data slot of
// its own, named after its address, and reads it first, as the filter reads a key's home slot.
// A client seen before (its slot is found: the returning-clients cases) has its slot written
// back with compare-and-swap and one counter incremented: the host calls of the default mode on
// a slot no recent request touched. A client not seen before (the new-client cases) reads its
// group's 256-byte index, writes the index and the slot, and increments two counters (the
// rule's allowed requests and its used slots). Its clients are spread over the groups of a
// table of 10,000 keys, or of "max_keys":N keys when the configuration says so, as the
// filter's are.
//
// With {"global":true} it makes the host calls of a request with one global rule (the
// GlobalWasm benchmark's, the filter configured with rate_limit_headers "both"): it reads the
// header map and the clock and sends the callout to the cluster "webdis" with the body the
// filter sends for that rule (one EVALSHA, built once at start), increments the calls counter,
// and on the answer reads the clock, records the latency, reads the answer's :status and body,
// counts the request as allowed and resumes it; its response gets the five rate-limit
// headers. Its guest time is what those host calls cost, the host's callout plumbing
// included; the filter's time beyond it is its own work of building the call and parsing the
// answer. An answer that is not a script's result is answered 502, so that a benchmark of it
// fails rather than measure a failure.
//
// It keeps one stream context and serves one stream at a time, which is all the benchmarks
// ask of it.
package main

import (
	"bytes"
	"strconv"
	"unsafe"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

type plugin struct {
	types.DefaultPluginContext
	allowed, used abi.MetricCounter
	perClient     bool
	groups        int // the new clients' groups: one per 32 keys
	stream        stream
	// global is set by {"global":true}: calls counts the callouts, latency records their
	// round trips, and body is the callout's body.
	global  bool
	calls   abi.MetricCounter
	latency abi.MetricHistogram
	body    []byte
}

// OnPluginStart defines the counters, as the filter defines its rules' counters at configure
// time, and reads which request to imitate.
func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	m, err := abi.DefineCounterMetric("ratelimit_requests_total;rule=r0;decision=allowed")
	if err != nil {
		return types.OnPluginStartStatusFailed
	}
	p.allowed, p.stream.plugin = m, p
	if cfg, _ := abi.GetPluginConfiguration(); bytes.Contains(cfg, []byte(`"per_client":true`)) {
		if p.used, err = abi.DefineCounterMetric("ratelimit_key_slots_used;rule=r0"); err != nil {
			return types.OnPluginStartStatusFailed
		}
		p.perClient, p.groups = true, (maxKeys(cfg)+31)/32
	}
	if cfg, _ := abi.GetPluginConfiguration(); bytes.Contains(cfg, []byte(`"global":true`)) {
		if !p.startGlobal() {
			return types.OnPluginStartStatusFailed
		}
	}
	return types.OnPluginStartStatusOK
}

// maxKeys returns the number N of "max_keys":N in cfg, or 10,000.
func maxKeys(cfg []byte) int {
	_, after, found := bytes.Cut(cfg, []byte(`"max_keys":`))
	if i := bytes.IndexAny(after, ",}"); found && i > 0 {
		if n, err := strconv.Atoi(string(after[:i])); err == nil && n > 0 {
			return n
		}
	}
	return 10000
}

// startGlobal defines the global mode's metrics and builds its callout's body: the filter's
// for the benchmark's rule ("bench0", a token bucket of 10^9 per hour keyed on x-user, the
// default max_keys and domain, key prefix "rl"), for the key "bench".
func (p *plugin) startGlobal() bool {
	var err error
	if p.calls, err = abi.DefineCounterMetric("ratelimit_redis_calls_total"); err != nil {
		return false
	}
	if p.latency, err = abi.DefineHistogramMetric("ratelimit_redis_latency_us"); err != nil {
		return false
	}
	r, err := redis.NewRule(algorithms.Config{Algorithm: "token_bucket", Limit: 1_000_000_000, Window: 3600_000_000_000})
	if err != nil {
		return false
	}
	r = r.Partitioned(1, 10000, "rl", "rl", "bench0")
	key := redis.AppendPartKey(nil, "rl", "rl", "bench0", 1, 0, []byte("5:bench"))
	p.body = redis.AppendEvalSHA(nil, 0, []redis.Item{{Rule: r, Key: key, N: 1}})
	p.global = true
	return true
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
// the index of one of its groups of 32 slots.
var (
	sourceAddress = []string{"source", "address"}
	slot          = "ratelimit|r0|10000.4242"
	policy        = []byte(`"r0";q=1000000000;w=1`)
	item          = []byte(`"r0";r=999999999;t=1`)
)

const (
	valueSize = 16 + 1 + 33
	indexSize = 32 * 8
)

// OnHttpRequestHeaders makes the request's host calls; their results are not used.
func (s *stream) OnHttpRequestHeaders(int, bool) types.Action {
	_, _ = abi.GetHttpRequestHeaderMap()
	if s.plugin.global {
		return s.callOut()
	}
	addr, _ := abi.GetPropertyString(sourceAddress)
	_ = abi.WallClockNanos()
	if s.plugin.perClient {
		s.client(addr)
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

// client makes the shared-data calls and counter increments of a client seen before or of a
// new one. The client's slot is named after its address, its group by a hash of the address:
// each client's own slot, groups shared by many clients, as in the filter's table.
func (s *stream) client(addr string) {
	name := s.slotName(addr)
	if v, cas, err := abi.GetSharedData(name); err == nil && len(v) == valueSize {
		v[valueSize-1]++
		_ = abi.SetSharedData(name, v, cas)
		s.plugin.allowed.Increment(1)
		return
	}
	h := 0
	for i := 0; i < len(addr); i++ {
		h = h*31 + int(addr[i])
	}
	s.name = strconv.AppendInt(append(s.name[:0], "ratelimit|r0|10000#"...), int64(h&0xffff%s.plugin.groups), 10)
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

// callOut sends the global mode's callout and pauses the request until its answer, which
// counts the request as allowed and resumes it.
func (s *stream) callOut() types.Action {
	p := s.plugin
	sent := abi.WallClockNanos()
	if _, err := abi.DispatchHttpCallAlways("webdis", calloutHeaders, p.body, 2000, func(_, bodySize, _ int) {
		p.latency.Record(uint64((abi.WallClockNanos() - sent) / 1000))
		status, _ := abi.GetHttpCallResponseHeader(":status")
		body, _ := abi.GetHttpCallResponseBody(0, bodySize)
		if status != "200" || !bytes.HasPrefix(body, []byte(`{"EVALSHA":[`)) {
			_ = abi.SendHttpResponse(502, nil, body, -1)
			return
		}
		p.allowed.Increment(1)
		_ = abi.ResumeHttpRequest()
	}); err != nil {
		_ = abi.SendHttpResponse(502, nil, []byte(err.Error()), -1)
		return types.ActionPause
	}
	p.calls.Increment(1)
	return types.ActionPause
}

// calloutHeaders are the filter's callout headers for the cluster "webdis" with the
// authority "webdis.test".
var calloutHeaders = abi.NewCalloutHeaders([][2]string{{":method", "POST"}, {":path", redis.Path},
	{":authority", "webdis.test"}, {"content-type", redis.ContentType}})

// The legacy rate-limit headers of the global mode's allowed request.
var (
	legacyLimit     = []byte("1000000000")
	legacyRemaining = []byte("999999999")
	legacyReset     = []byte("1")
)

// OnHttpResponseHeaders adds the two rate-limit headers of an allowed request, and in the
// global mode the three legacy ones too.
func (s *stream) OnHttpResponseHeaders(int, bool) types.Action {
	_ = abi.AddHttpResponseHeaderBytes("ratelimit-policy", policy)
	_ = abi.AddHttpResponseHeaderBytes("ratelimit", item)
	if s.plugin.global {
		_ = abi.AddHttpResponseHeaderBytes("x-ratelimit-limit", legacyLimit)
		_ = abi.AddHttpResponseHeaderBytes("x-ratelimit-remaining", legacyRemaining)
		_ = abi.AddHttpResponseHeaderBytes("x-ratelimit-reset", legacyReset)
	}
	return types.ActionContinue
}

func init() { abi.SetVMContext(&vm{}) }

func main() {}
