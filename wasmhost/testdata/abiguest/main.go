// Command abiguest is a small proxy-wasm guest written directly against the
// ABI (go:wasmimport / go:wasmexport, no SDK). The wasmhost tests use it to
// probe host behaviour independently of the real filter. What it does is
// chosen per request by the x-op request header, and at start-up by
// environment variables (vm_config.environment_variables).
package main

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

func main() {}

// ---- host imports ----

//go:wasmimport env proxy_log
func proxyLog(level uint32, ptr unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_log_level
func proxyGetLogLevel(ret unsafe.Pointer) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(typ, start, max uint32, ptrPtr, sizePtr unsafe.Pointer) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBufferBytes(typ, start, length uint32, ptr unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeaderMapValue(typ uint32, kp unsafe.Pointer, ks uint32, vpp, vsp unsafe.Pointer) uint32

//go:wasmimport env proxy_get_header_map_pairs
func proxyGetHeaderMapPairs(typ uint32, pp, sp unsafe.Pointer) uint32

//go:wasmimport env proxy_add_header_map_value
func proxyAddHeaderMapValue(typ uint32, kp unsafe.Pointer, ks uint32, vp unsafe.Pointer, vs uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeaderMapValue(typ uint32, kp unsafe.Pointer, ks uint32, vp unsafe.Pointer, vs uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemoveHeaderMapValue(typ uint32, kp unsafe.Pointer, ks uint32) uint32

//go:wasmimport env proxy_get_header_map_size
func proxyGetHeaderMapSize(typ uint32, ret unsafe.Pointer) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(pp unsafe.Pointer, ps uint32, vpp, vsp unsafe.Pointer) uint32

//go:wasmimport env proxy_set_property
func proxySetProperty(pp unsafe.Pointer, ps uint32, vp unsafe.Pointer, vs uint32) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(kp unsafe.Pointer, ks uint32, vpp, vsp, casp unsafe.Pointer) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetSharedData(kp unsafe.Pointer, ks uint32, vp unsafe.Pointer, vs uint32, cas uint32) uint32

//go:wasmimport env proxy_http_call
func proxyHTTPCall(up unsafe.Pointer, us uint32, hp unsafe.Pointer, hs uint32, bp unsafe.Pointer, bs uint32, tp unsafe.Pointer, ts uint32, timeout uint32, tokenp unsafe.Pointer) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(status uint32, dp unsafe.Pointer, ds uint32, bp unsafe.Pointer, bs uint32, hp unsafe.Pointer, hs uint32, grpc int32) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(typ uint32) uint32

//go:wasmimport env proxy_close_stream
func proxyCloseStream(typ uint32) uint32

//go:wasmimport env proxy_set_effective_context
func proxySetEffectiveContext(id uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriod(ms uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(typ uint32, np unsafe.Pointer, ns uint32, idp unsafe.Pointer) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, offset int64) uint32

//go:wasmimport env proxy_record_metric
func proxyRecordMetric(id uint32, value uint64) uint32

//go:wasmimport env proxy_get_metric
func proxyGetMetric(id uint32, ret unsafe.Pointer) uint32

//go:wasmimport env proxy_get_status
func proxyGetStatus(codep, pp, sp unsafe.Pointer) uint32

//go:wasmimport env proxy_get_current_time_nanoseconds
func proxyGetCurrentTime(ret unsafe.Pointer) uint32

//go:wasmimport env proxy_register_shared_queue
func proxyRegisterSharedQueue(np unsafe.Pointer, ns uint32, tokenp unsafe.Pointer) uint32

//go:wasmimport env proxy_enqueue_shared_queue
func proxyEnqueueSharedQueue(token uint32, dp unsafe.Pointer, ds uint32) uint32

//go:wasmimport env proxy_dequeue_shared_queue
func proxyDequeueSharedQueue(token uint32, pp, sp unsafe.Pointer) uint32

// ---- memory ----

// pins keeps host-allocated buffers reachable until the callback that asked
// for them returns (a raw address does not keep Go memory alive).
var pins [][]byte

// sleepInAlloc makes the allocator sleep (GUEST_SLEEP_IN_ALLOC, in ms), as the Go runtime does
// when a collection starts inside it: the sleep is a poll_oneoff during the allocator.
var sleepInAlloc, _ = strconv.Atoi(os.Getenv("GUEST_SLEEP_IN_ALLOC"))

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) uint32 {
	if sleepInAlloc > 0 {
		time.Sleep(time.Duration(sleepInAlloc) * time.Millisecond)
	}
	if size == 0 {
		size = 1
	}
	b := make([]byte, size)
	pins = append(pins, b)
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

func enter() { pins = pins[:0] }

func sp(s string) (unsafe.Pointer, uint32) {
	return unsafe.Pointer(unsafe.StringData(s)), uint32(len(s))
}

func bp(b []byte) (unsafe.Pointer, uint32) {
	if len(b) == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&b[0]), uint32(len(b))
}

func load(ptr, size uint32) []byte {
	if size == 0 {
		return nil
	}
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(uintptr(ptr))), size)...)
}

func logf(level uint32, msg string) {
	p, n := sp(msg)
	proxyLog(level, p, n)
}

func encodePairs(pairs [][2]string) []byte {
	n := 4
	for _, p := range pairs {
		n += 8 + len(p[0]) + len(p[1]) + 2
	}
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b, uint32(len(pairs)))
	pos := 4
	for _, p := range pairs {
		binary.LittleEndian.PutUint32(b[pos:], uint32(len(p[0])))
		binary.LittleEndian.PutUint32(b[pos+4:], uint32(len(p[1])))
		pos += 8
	}
	for _, p := range pairs {
		pos += copy(b[pos:], p[0]) + 1
		pos += copy(b[pos:], p[1]) + 1
	}
	return b
}

// ---- helpers over the ABI ----

func getHeader(typ uint32, key string) (string, uint32) {
	var ptr, size uint32
	kp, ks := sp(key)
	st := proxyGetHeaderMapValue(typ, kp, ks, unsafe.Pointer(&ptr), unsafe.Pointer(&size))
	return string(load(ptr, size)), st
}

func addHeader(typ uint32, key, value string) uint32 {
	kp, ks := sp(key)
	vp, vs := sp(value)
	return proxyAddHeaderMapValue(typ, kp, ks, vp, vs)
}

func getBuffer(typ, start, max uint32) ([]byte, uint32) {
	var ptr, size uint32
	st := proxyGetBufferBytes(typ, start, max, unsafe.Pointer(&ptr), unsafe.Pointer(&size))
	return load(ptr, size), st
}

func getProperty(path string) ([]byte, uint32) {
	var ptr, size uint32
	p, n := sp(path)
	st := proxyGetProperty(p, n, unsafe.Pointer(&ptr), unsafe.Pointer(&size))
	return load(ptr, size), st
}

func getShared(key string) ([]byte, uint32, uint32) {
	var ptr, size, cas uint32
	p, n := sp(key)
	st := proxyGetSharedData(p, n, unsafe.Pointer(&ptr), unsafe.Pointer(&size), unsafe.Pointer(&cas))
	return load(ptr, size), cas, st
}

func setShared(key string, value []byte, cas uint32) uint32 {
	p, n := sp(key)
	vp, vs := bp(value)
	return proxySetSharedData(p, n, vp, vs, cas)
}

// incrShared increments a decimal counter with a bounded CAS loop.
func incrShared(key string) (int, bool) {
	for i := 0; i < 1000; i++ {
		v, cas, st := getShared(key)
		n := 0
		if st == 0 {
			n, _ = strconv.Atoi(string(v))
		}
		n++
		if setShared(key, []byte(strconv.Itoa(n)), cas) == 0 {
			return n, true
		}
	}
	return 0, false
}

func defineMetric(typ uint32, name string) uint32 {
	var id uint32
	p, n := sp(name)
	proxyDefineMetric(typ, p, n, unsafe.Pointer(&id))
	return id
}

// ---- start-up ----

func init() {
	if os.Getenv("GUEST_LOG_IN_INIT") != "" {
		logf(2, "init: "+os.Getenv("GUEST_LOG_IN_INIT"))
	}
	if ms, _ := strconv.Atoi(os.Getenv("GUEST_SLEEP_IN_INIT")); ms > 0 {
		time.Sleep(time.Duration(ms) * time.Millisecond)
		logf(2, "init: slept")
	}
	if os.Getenv("GUEST_RESTRICTED_IN_INIT") != "" {
		getShared("not-allowed-during-initialize")
	}
}

// ---- contexts ----

type streamState struct {
	op    string
	token uint32
}

var (
	rootID    uint32
	streams   = map[uint32]*streamState{}
	byToken   = map[uint32]uint32{}
	ticksID   uint32
	queue     uint32
	config    = map[string]string{}
	lifecycle []string
)

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_context_create
func onContextCreate(id, root uint32) {
	enter()
	if root == 0 {
		rootID = id
		return
	}
	streams[id] = &streamState{}
}

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) uint32 {
	enter()
	b, _ := getBuffer(6, 0, size)
	if string(b) == "reject-vm" {
		logf(4, "vm config rejected")
		return 0
	}
	return 1
}

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) uint32 {
	enter()
	b, st := getBuffer(7, 0, size)
	if st != 0 && size > 0 {
		logf(4, "cannot read plugin config: "+strconv.Itoa(int(st)))
		return 0
	}
	for _, kv := range strings.Split(string(b), ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			config[k] = v
		}
	}
	if config["reject"] != "" {
		logf(4, "invalid plugin config: "+config["reject"])
		return 0
	}
	if ms, _ := strconv.Atoi(config["tick"]); ms > 0 {
		proxySetTickPeriod(uint32(ms))
	}
	ticksID = defineMetric(0, "guest_ticks_total")
	if config["queue"] != "" {
		p, n := sp(config["queue"])
		proxyRegisterSharedQueue(p, n, unsafe.Pointer(&queue))
	}
	if ms, _ := strconv.Atoi(config["sleep_in_configure"]); ms > 0 {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	return 1
}

//go:wasmexport proxy_on_tick
func onTick(root uint32) {
	enter()
	incrShared("guest.ticks")
	proxyIncrementMetric(ticksID, 1)
}

//go:wasmexport proxy_on_queue_ready
func onQueueReady(root, token uint32) {
	enter()
	var ptr, size uint32
	for proxyDequeueSharedQueue(token, unsafe.Pointer(&ptr), unsafe.Pointer(&size)) == 0 {
		logf(2, "queue item: "+string(load(ptr, size)))
	}
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n, eos uint32) uint32 {
	enter()
	st := streams[id]
	op, _ := getHeader(0, "x-op")
	st.op = op
	switch op {
	case "":
		addHeader(0, "x-guest", "ok")
		addHeader(0, "x-guest-eos", strconv.Itoa(int(eos)))
		return 0
	case "panic":
		panic("guest panic on purpose")
	case "recover-panic":
		func() {
			defer func() {
				if r := recover(); r != nil {
					logf(4, "recovered: "+r.(string))
				}
			}()
			panic("recoverable")
		}()
		addHeader(0, "x-recovered", "1")
		return 0
	case "sleep":
		ms, _ := getHeader(0, "x-ms")
		d, _ := strconv.Atoi(ms)
		time.Sleep(time.Duration(d) * time.Millisecond)
		addHeader(0, "x-slept", ms)
		return 0
	case "local":
		body := []byte("denied\n")
		hdrs := encodePairs([][2]string{{"X-Guest", "denied"}})
		dp, ds := sp("denied by guest")
		b, bs := bp(body)
		h, hs := bp(hdrs)
		proxySendLocalResponse(429, dp, ds, b, bs, h, hs, -1)
		return 0 // Envoy stops the stream anyway
	case "stop":
		return 1
	case "close":
		proxyCloseStream(0)
		return 0
	case "callout", "callout-panic":
		cluster, _ := getHeader(0, "x-cluster")
		path, _ := getHeader(0, "x-callout-path")
		if path == "" {
			path = "/"
		}
		timeout := uint32(1000)
		if t, s := getHeader(0, "x-timeout"); s == 0 {
			v, _ := strconv.Atoi(t)
			timeout = uint32(v)
		}
		hdrs := encodePairs([][2]string{{":method", "GET"}, {":path", path}, {":authority", "callout.test"}, {"x-from", "guest"}})
		if m, s := getHeader(0, "x-drop"); s == 0 {
			hdrs = encodePairs([][2]string{{":method", "GET"}, {":path", path}, {":authority", "callout.test"}}[:0])
			_ = m
		}
		cp, cs := sp(cluster)
		h, hs := bp(hdrs)
		var token uint32
		if r := proxyHTTPCall(cp, cs, h, hs, nil, 0, nil, 0, timeout, unsafe.Pointer(&token)); r != 0 {
			addHeader(0, "x-callout-error", strconv.Itoa(int(r)))
			return 0
		}
		st.token = token
		byToken[token] = id
		addHeader(0, "x-callout-token", strconv.Itoa(int(token)))
		return 1
	case "props":
		list, _ := getHeader(0, "x-props")
		for i, p := range strings.Split(list, ",") {
			v, s := getProperty(strings.ReplaceAll(p, ".", "\x00"))
			val := string(v)
			if s != 0 {
				val = "!" + strconv.Itoa(int(s))
			} else if len(v) == 8 && (strings.HasSuffix(p, ".port") || strings.HasSuffix(p, ".code")) {
				val = strconv.FormatUint(binary.LittleEndian.Uint64(v), 10)
			}
			addHeader(0, "x-prop-"+strconv.Itoa(i), val)
		}
		return 0
	case "setprop":
		p, n := sp("my.prop")
		vp, vs := sp("my-value")
		proxySetProperty(p, n, vp, vs)
		v, s := getProperty("my.prop")
		addHeader(0, "x-prop", string(v)+"/"+strconv.Itoa(int(s)))
		return 0
	case "shared-incr":
		key, _ := getHeader(0, "x-key")
		n, ok := incrShared(key)
		if !ok {
			addHeader(0, "x-count", "exhausted")
			return 0
		}
		addHeader(0, "x-count", strconv.Itoa(n))
		return 0
	case "metrics":
		c := defineMetric(0, "guest_counter")
		g := defineMetric(1, "guest_gauge")
		h := defineMetric(2, "guest_hist")
		var res []string
		res = append(res, "inc="+strconv.Itoa(int(proxyIncrementMetric(c, 2))))
		res = append(res, "incneg="+strconv.Itoa(int(proxyIncrementMetric(c, -1))))
		res = append(res, "gset="+strconv.Itoa(int(proxyRecordMetric(g, 42))))
		res = append(res, "gdec="+strconv.Itoa(int(proxyIncrementMetric(g, -2))))
		res = append(res, "hrec="+strconv.Itoa(int(proxyRecordMetric(h, 7))))
		var v uint64
		res = append(res, "cget="+strconv.Itoa(int(proxyGetMetric(c, unsafe.Pointer(&v))))+":"+strconv.FormatUint(v, 10))
		res = append(res, "hget="+strconv.Itoa(int(proxyGetMetric(h, unsafe.Pointer(&v)))))
		res = append(res, "unknown="+strconv.Itoa(int(proxyIncrementMetric(0x7ffffff0, 1))))
		addHeader(0, "x-metrics", strings.Join(res, ","))
		return 0
	case "enqueue":
		d, _ := getHeader(0, "x-data")
		p, n := sp(d)
		addHeader(0, "x-enqueue", strconv.Itoa(int(proxyEnqueueSharedQueue(queue, p, n))))
		return 0
	case "probe":
		addHeader(0, "x-probe", probe())
		return 0
	case "body":
		return 0
	}
	return 0
}

// probe exercises edge cases of the ABI and reports each status code.
func probe() string {
	var res []string
	add := func(name string, st uint32) { res = append(res, name+"="+strconv.Itoa(int(st))) }
	_, s := getHeader(0, "x-missing")
	add("get_missing", s)
	_, s = getHeader(9, "x")
	add("get_badtype", s)
	_, s = getHeader(2, ":status") // response headers not available yet
	add("get_resp_in_req", s)
	_, s = getHeader(6, ":status")
	add("get_callout_outside", s)
	add("add_resp_in_req", addHeader(2, "x", "y"))
	var size uint32
	add("size_req", proxyGetHeaderMapSize(0, unsafe.Pointer(&size)))
	res = append(res, "size_val="+strconv.Itoa(int(size)))
	add("size_callout", proxyGetHeaderMapSize(6, unsafe.Pointer(&size)))
	kp, ks := sp("X-Upper")
	vp, vs := sp("v1")
	proxyAddHeaderMapValue(0, kp, ks, vp, vs)
	proxyAddHeaderMapValue(0, kp, ks, vp, vs)
	vp2, vs2 := sp("v2")
	add("replace", proxyReplaceHeaderMapValue(0, kp, ks, vp2, vs2))
	v, _ := getHeader(0, "x-upper")
	res = append(res, "replaced="+v)
	var pptr, psize uint32
	add("pairs", proxyGetHeaderMapPairs(0, unsafe.Pointer(&pptr), unsafe.Pointer(&psize)))
	pairs := load(pptr, psize)
	count := 0
	if len(pairs) >= 4 {
		count = int(binary.LittleEndian.Uint32(pairs))
	}
	res = append(res, "pairs_count="+strconv.Itoa(count))
	add("remove", proxyRemoveHeaderMapValue(0, kp, ks))
	_, s = getHeader(0, "x-upper")
	add("get_removed", s)
	_, s = getBuffer(7, 0, 10)
	add("plugin_cfg_outside_configure", s)
	b, s := getBuffer(6, 0, 100)
	add("vm_cfg", s)
	res = append(res, "vm_cfg_val="+string(b))
	_, s = getBuffer(4, 0, 10)
	add("callout_body_outside", s)
	_, s = getBuffer(99, 0, 10)
	add("buf_badtype", s)
	_, _, s = getShared("probe-missing")
	add("shared_missing", s)
	add("shared_set_absent_cas", setShared("probe-key", []byte("a"), 12345))
	_, cas, _ := getShared("probe-key")
	add("shared_set_cas0", setShared("probe-key", []byte("b"), 0))
	add("shared_set_stale", setShared("probe-key", []byte("c"), cas))
	_, cas, _ = getShared("probe-key")
	add("shared_set_fresh", setShared("probe-key", []byte("d"), cas))
	add("effective_gone", proxySetEffectiveContext(99999))
	add("continue_bad", proxyContinueStream(9))
	add("continue_upstream", proxyContinueStream(3))
	add("log_badlevel", proxyLog(9, nil, 0))
	var lvl uint32
	proxyGetLogLevel(unsafe.Pointer(&lvl))
	res = append(res, "log_level="+strconv.Itoa(int(lvl)))
	var now uint64
	add("time", proxyGetCurrentTime(unsafe.Pointer(&now)))
	res = append(res, "time_val="+strconv.FormatUint(now, 10))
	cp, cs := sp("no-such-cluster")
	h, hs := bp(encodePairs([][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "x"}}))
	var token uint32
	add("http_unknown_cluster", proxyHTTPCall(cp, cs, h, hs, nil, 0, nil, 0, 100, unsafe.Pointer(&token)))
	cp, cs = sp("echo")
	h, hs = bp(encodePairs([][2]string{{":method", "GET"}, {":path", "/"}}))
	add("http_missing_authority", proxyHTTPCall(cp, cs, h, hs, nil, 0, nil, 0, 100, unsafe.Pointer(&token)))
	var code, mp, ms uint32
	add("get_status", proxyGetStatus(unsafe.Pointer(&code), unsafe.Pointer(&mp), unsafe.Pointer(&ms)))
	return strings.Join(res, ",")
}

//go:wasmexport proxy_on_request_body
func onRequestBody(id, size, eos uint32) uint32 {
	enter()
	if streams[id].op == "body" {
		b, _ := getBuffer(0, 0, size)
		p, n := sp("[" + string(b) + "]")
		proxySetBufferBytes(0, 0, size, p, n)
	}
	return 0
}

//go:wasmexport proxy_on_request_trailers
func onRequestTrailers(id, n uint32) uint32 { enter(); return 0 }

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(id, n, eos uint32) uint32 {
	enter()
	addHeader(2, "x-guest-resp", "ok")
	if streams[id].op == "resp-local" {
		dp, ds := sp("from response")
		b, bs := bp([]byte("replaced"))
		proxySendLocalResponse(418, dp, ds, b, bs, nil, 0, -1)
	}
	// In the response phase the request headers are gone (Envoy nulls them).
	_, s := getHeader(0, ":path")
	addHeader(2, "x-req-path-status", strconv.Itoa(int(s)))
	return 0
}

//go:wasmexport proxy_on_response_body
func onResponseBody(id, size, eos uint32) uint32 { enter(); return 0 }

//go:wasmexport proxy_on_response_trailers
func onResponseTrailers(id, n uint32) uint32 { enter(); return 0 }

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(root, token, nh, nb, nt uint32) {
	enter()
	id, ok := byToken[token]
	delete(byToken, token)
	var code, mp, ms uint32
	proxyGetStatus(unsafe.Pointer(&code), unsafe.Pointer(&mp), unsafe.Pointer(&ms))
	status, _ := getHeader(6, ":status")
	body, _ := getBuffer(4, 0, nb)
	if !ok {
		logf(3, "callout response for unknown token")
		return
	}
	if st := streams[id]; st != nil && st.op == "callout-panic" {
		panic("guest panic in the callout response")
	}
	if r := proxySetEffectiveContext(id); r != 0 {
		logf(3, "stream "+strconv.Itoa(int(id))+" is gone: set_effective_context="+strconv.Itoa(int(r))+" status="+status)
		return
	}
	addHeader(0, "x-callout-status", status)
	addHeader(0, "x-callout-body", string(body))
	addHeader(0, "x-callout-n", strconv.Itoa(int(nh))+"/"+strconv.Itoa(int(nb))+"/"+strconv.Itoa(int(nt)))
	addHeader(0, "x-callout-get-status", strconv.Itoa(int(code))+":"+string(load(mp, ms)))
	proxyContinueStream(0)
	// After continue Envoy has dropped the request headers.
	r := addHeader(0, "x-after-continue", "1")
	logf(1, "add after continue: "+strconv.Itoa(int(r)))
}

//go:wasmexport proxy_on_log
func onLog(id uint32) {
	enter()
	if id != rootID {
		p, _ := getHeader(0, ":path")
		s, _ := getHeader(2, ":status")
		logf(1, "on_log "+strconv.Itoa(int(id))+" path="+p+" status="+s)
	}
}

//go:wasmexport proxy_on_done
func onDone(id uint32) uint32 {
	enter()
	logf(1, "on_done "+strconv.Itoa(int(id)))
	return 1
}

//go:wasmexport proxy_on_delete
func onDelete(id uint32) {
	enter()
	logf(1, "on_delete "+strconv.Itoa(int(id)))
	delete(streams, id)
}
