package wasmhost

import (
	"strings"
	"time"
	"unicode"

	"github.com/tetratelabs/wazero/api"
)

// Host functions of the "env" module. Each reads its arguments from the
// wazero value stack and writes its result to stack[0]; the behaviour follows
// proxy-wasm-cpp-host's exports.cc and Envoy's Context, including their
// status codes for edge cases.

func ret(stack []uint64, st Status) { stack[0] = uint64(st) }

func u32(stack []uint64, i int) uint32 { return api.DecodeU32(stack[i]) }

// memStatus is the status of a host call whose last step writes a result through a guest
// pointer: OK, or InvalidMemoryAccess when the pointer is out of bounds, as in cpp-host.
func memStatus(ok bool) Status {
	if ok {
		return StatusOK
	}
	return StatusInvalidMemoryAccess
}

func hProxyLog(v *vm, stack []uint64) {
	level, ptr, size := u32(stack, 0), u32(stack, 1), u32(stack, 2)
	if level > LogCritical.abi() {
		ret(stack, StatusBadArgument)
		return
	}
	msg, ok := v.str(ptr, size)
	if !ok {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	v.h.log(v, v.activeID(), levelFromABI(level), SourceProxyLog, msg)
	ret(stack, StatusOK)
}

func hGetLogLevel(v *vm, stack []uint64) {
	ret(stack, memStatus(v.mem.WriteUint32Le(u32(stack, 0), v.h.opts.LogLevel.abi())))
}

func hGetStatus(v *vm, stack []uint64) {
	codePtr, ptrPtr, sizePtr := u32(stack, 0), u32(stack, 1), u32(stack, 2)
	if !v.mem.WriteUint32Le(codePtr, v.statusCode) {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	ret(stack, copyOut(v, v.statusMsg, ptrPtr, sizePtr))
}

func hSetProperty(v *vm, stack []uint64) {
	path, ok1 := v.str(u32(stack, 0), u32(stack, 1))
	value, ok2 := v.bytes(u32(stack, 2), u32(stack, 3))
	if !ok1 || !ok2 {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	s := v.activeStream()
	if s == nil {
		// Envoy keeps properties in the stream's filter state; the root
		// context has no stream info.
		ret(stack, StatusNotFound)
		return
	}
	if s.properties == nil {
		s.properties = map[string][]byte{}
	}
	s.properties[path] = append([]byte(nil), value...)
	ret(stack, StatusOK)
}

func hGetProperty(v *vm, stack []uint64) {
	path, ok := v.str(u32(stack, 0), u32(stack, 1))
	if !ok {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	value, st := v.property(path)
	if st != StatusOK {
		ret(stack, st)
		return
	}
	ret(stack, copyOut(v, value, u32(stack, 2), u32(stack, 3)))
}

func hSendLocalResponse(v *vm, stack []uint64) {
	status := u32(stack, 0)
	details, ok1 := v.str(u32(stack, 1), u32(stack, 2))
	body, ok2 := v.bytes(u32(stack, 3), u32(stack, 4))
	hdrs, ok3 := v.bytes(u32(stack, 5), u32(stack, 6))
	grpc := int32(u32(stack, 7))
	if !ok1 || !ok2 || !ok3 {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	pairs, _ := DecodePairs(hdrs) // malformed or oversized maps count as empty
	s := v.activeStream()
	if s == nil || s.done {
		// No decoder callbacks (root context): Envoy does nothing and says OK.
		ret(stack, StatusOK)
		return
	}
	if s.local == nil {
		// Envoy only honours the first local reply of a stream.
		if grpc < 0 || grpc > 16 {
			grpc = -1
		}
		for i := range pairs {
			pairs[i][0] = strings.ToLower(pairs[i][0])
		}
		s.local = &LocalResponse{
			Status:     int(status),
			Headers:    pairs,
			Body:       append([]byte(nil), body...),
			Details:    replaceSpaces(details),
			GrpcStatus: grpc,
		}
		v.markDirty(s)
	}
	ret(stack, StatusOK)
}

// replaceSpaces is Envoy's StringUtil::replaceAllEmptySpace for details.
func replaceSpaces(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return '_'
		}
		return r
	}, s)
}

func hGetSharedData(v *vm, stack []uint64) {
	key, ok := v.str(u32(stack, 0), u32(stack, 1))
	if !ok {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	value, cas, st := v.h.shared.Get(v.h.opts.VMID, key)
	if st != StatusOK {
		ret(stack, st)
		return
	}
	if st := copyOut(v, value, u32(stack, 2), u32(stack, 3)); st != StatusOK {
		ret(stack, st)
		return
	}
	ret(stack, memStatus(v.mem.WriteUint32Le(u32(stack, 4), cas)))
}

func hSetSharedData(v *vm, stack []uint64) {
	key, ok1 := v.str(u32(stack, 0), u32(stack, 1))
	value, ok2 := v.bytes(u32(stack, 2), u32(stack, 3))
	if !ok1 || !ok2 {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	ret(stack, v.h.shared.Set(v.h.opts.VMID, key, value, u32(stack, 4)))
}

func hRegisterSharedQueue(v *vm, stack []uint64) {
	name, ok := v.str(u32(stack, 0), u32(stack, 1))
	if !ok {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	token := v.h.shared.registerQueue(v.h.opts.VMID, name, func(token uint32) {
		v.postReliably(func() { v.queueReady(token) })
	})
	ret(stack, memStatus(v.mem.WriteUint32Le(u32(stack, 2), token)))
}

func hResolveSharedQueue(v *vm, stack []uint64) {
	vmID, ok1 := v.str(u32(stack, 0), u32(stack, 1))
	name, ok2 := v.str(u32(stack, 2), u32(stack, 3))
	if !ok1 || !ok2 {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	token, st := v.h.shared.resolveQueue(vmID, name)
	if st != StatusOK {
		ret(stack, st)
		return
	}
	ret(stack, memStatus(v.mem.WriteUint32Le(u32(stack, 4), token)))
}

func hDequeueSharedQueue(v *vm, stack []uint64) {
	data, st := v.h.shared.dequeue(u32(stack, 0))
	if st != StatusOK {
		ret(stack, st)
		return
	}
	ret(stack, copyOut(v, data, u32(stack, 1), u32(stack, 2)))
}

func hEnqueueSharedQueue(v *vm, stack []uint64) {
	data, ok := v.bytes(u32(stack, 1), u32(stack, 2))
	if !ok {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	ret(stack, v.h.shared.enqueue(u32(stack, 0), data))
}

// queueReady delivers proxy_on_queue_ready to the VM that registered a queue.
func (v *vm) queueReady(token uint32) {
	if !v.rootAlive || v.failed.Load() {
		return
	}
	v.callback("proxy_on_queue_ready", v.fn.onQueueReady, v.rootID, uint64(v.rootID), uint64(token))
	v.settle()
}

// constMap is Envoy's getConstMap: the maps the guest can read now.
func (v *vm) constMap(t uint32) *headerMap {
	switch t {
	case MapRequestHeaders, MapRequestTrailers, MapResponseHeaders, MapResponseTrailers:
		s := v.activeStream()
		if s == nil {
			return nil
		}
		if s.avail[t] || (s.logPhase && t != MapRequestTrailers) {
			return s.maps[t]
		}
	case MapHTTPCallResponseHeaders:
		if v.callout != nil {
			return v.callout.headers
		}
	case MapHTTPCallResponseTrailer:
		if v.callout != nil {
			return v.callout.trailers
		}
	}
	return nil
}

// mutableMap is Envoy's getMap: only the stream's own maps, only while
// Envoy still holds them (callout maps are not mutable, so their size query
// is BadArgument in Envoy too).
func (v *vm) mutableMap(t uint32) *headerMap {
	if t > MapResponseTrailers {
		return nil
	}
	s := v.activeStream()
	if s == nil || !s.avail[t] {
		return nil
	}
	return s.maps[t]
}

// headerArgs reads what the header-map calls that name a key take: the map type, the key
// and, withValue, the value. A map type out of range is BadArgument before any guest memory
// is read, as in cpp-host.
func headerArgs(v *vm, stack []uint64, withValue bool) (t uint32, key, value string, st Status) {
	t = u32(stack, 0)
	if t > mapTypeMax {
		return t, "", "", StatusBadArgument
	}
	key, ok := v.str(u32(stack, 1), u32(stack, 2))
	if ok && withValue {
		value, ok = v.str(u32(stack, 3), u32(stack, 4))
	}
	if !ok {
		return t, "", "", StatusInvalidMemoryAccess
	}
	return t, key, value, StatusOK
}

func hGetHeaderMapValue(v *vm, stack []uint64) {
	t, key, _, st := headerArgs(v, stack, false)
	if st != StatusOK {
		ret(stack, st)
		return
	}
	m := v.constMap(t)
	if m == nil {
		ret(stack, StatusBadArgument)
		return
	}
	val, found := m.get(key)
	if !found {
		ret(stack, StatusNotFound)
		return
	}
	ret(stack, copyOut(v, val, u32(stack, 3), u32(stack, 4)))
}

// headerMutation is the common body of the add, replace and remove calls, which differ only
// in whether they take a value and in what they do to the map.
func headerMutation(v *vm, stack []uint64, withValue bool, op func(m *headerMap, key, value string)) {
	t, key, value, st := headerArgs(v, stack, withValue)
	if st != StatusOK {
		ret(stack, st)
		return
	}
	m := v.mutableMap(t)
	if m == nil {
		ret(stack, StatusBadArgument)
		return
	}
	op(m, key, value)
	ret(stack, StatusOK)
}

func hAddHeaderMapValue(v *vm, stack []uint64) {
	headerMutation(v, stack, true, func(m *headerMap, k, val string) { m.add(k, val) })
}

func hReplaceHeaderMapValue(v *vm, stack []uint64) {
	headerMutation(v, stack, true, func(m *headerMap, k, val string) { m.replace(k, val) })
}

func hRemoveHeaderMapValue(v *vm, stack []uint64) {
	headerMutation(v, stack, false, func(m *headerMap, k, _ string) { m.remove(k) })
}

func hGetHeaderMapPairs(v *vm, stack []uint64) {
	t := u32(stack, 0)
	if t > mapTypeMax {
		ret(stack, StatusBadArgument)
		return
	}
	var pairs [][2]string
	if m := v.constMap(t); m != nil {
		pairs = m.kv // serialized before anything can change the map
	}
	ret(stack, v.copyOutPairs(pairs, u32(stack, 1), u32(stack, 2)))
}

func hSetHeaderMapPairs(v *vm, stack []uint64) {
	t := u32(stack, 0)
	if t > mapTypeMax {
		ret(stack, StatusBadArgument)
		return
	}
	buf, ok := v.bytes(u32(stack, 1), u32(stack, 2))
	if !ok {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	m := v.mutableMap(t)
	if m == nil {
		ret(stack, StatusBadArgument)
		return
	}
	pairs, _ := DecodePairs(buf) // Envoy: a malformed map empties the headers
	m.setAll(pairs)
	ret(stack, StatusOK)
}

func hGetHeaderMapSize(v *vm, stack []uint64) {
	t := u32(stack, 0)
	if t > mapTypeMax {
		ret(stack, StatusBadArgument)
		return
	}
	m := v.mutableMap(t)
	if m == nil {
		ret(stack, StatusBadArgument)
		return
	}
	ret(stack, memStatus(v.mem.WriteUint32Le(u32(stack, 1), m.byteSize())))
}

// buffer is Envoy's Context::getBuffer. exists=false is NotFound. body is
// non-nil only for a stream body Envoy currently holds (the mutable ones).
func (v *vm) buffer(t uint32) (data []byte, exists bool, body *[]byte) {
	switch t {
	case BufferRequestBody, BufferResponseBody:
		s := v.activeStream()
		if s != nil && s.bodyAvail[t] {
			return s.body[t], true, &s.body[t]
		}
		return nil, true, nil // Envoy wraps a null buffer: size 0
	case BufferHTTPCallResponseBody:
		if v.callout != nil {
			return v.callout.body, true, nil
		}
		return nil, false, nil
	case BufferVMConfiguration:
		return v.h.opts.VMConfig, true, nil
	case BufferPluginConfiguration:
		if v.inConfigure {
			return v.h.opts.PluginConfig, true, nil
		}
		return nil, false, nil
	default: // network data, gRPC receive buffer, call data: empty here
		return nil, true, nil
	}
}

func hGetBufferBytes(v *vm, stack []uint64) {
	t, start, length := u32(stack, 0), u32(stack, 1), u32(stack, 2)
	if t > bufferTypeMax {
		ret(stack, StatusBadArgument)
		return
	}
	data, exists, _ := v.buffer(t)
	if !exists {
		ret(stack, StatusNotFound)
		return
	}
	if start > start+length {
		ret(stack, StatusBadArgument) // overflow, as cpp-host checks
		return
	}
	if int(start) > len(data) {
		ret(stack, StatusBadArgument)
		return
	}
	if int(start+length) > len(data) {
		length = uint32(len(data)) - start
	}
	if length == 0 {
		// cpp-host returns Ok without touching the out-parameters.
		ret(stack, StatusOK)
		return
	}
	ret(stack, copyOut(v, data[start:start+length], u32(stack, 3), u32(stack, 4)))
}

func hGetBufferStatus(v *vm, stack []uint64) {
	t := u32(stack, 0)
	if t > bufferTypeMax {
		ret(stack, StatusBadArgument)
		return
	}
	data, exists, _ := v.buffer(t)
	if !exists {
		ret(stack, StatusNotFound)
		return
	}
	ret(stack, memStatus(v.mem.WriteUint32Le(u32(stack, 1), uint32(len(data))) && v.mem.WriteUint32Le(u32(stack, 2), 0)))
}

func hSetBufferBytes(v *vm, stack []uint64) {
	t, start, length := u32(stack, 0), u32(stack, 1), u32(stack, 2)
	if t > bufferTypeMax {
		ret(stack, StatusBadArgument)
		return
	}
	data, ok := v.bytes(u32(stack, 3), u32(stack, 4))
	if !ok {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	_, exists, body := v.buffer(t)
	if !exists {
		ret(stack, StatusNotFound)
		return
	}
	if body == nil {
		ret(stack, StatusBadArgument) // immutable buffer
		return
	}
	// Envoy's Buffer::copyFrom: start 0 drains length bytes and prepends,
	// start at or past the end appends, anything else is BadArgument.
	cur := *body
	switch {
	case start == 0:
		drain := min(int(length), len(cur))
		*body = append(append([]byte(nil), data...), cur[drain:]...)
	case int(start) >= len(cur):
		*body = append(append([]byte(nil), cur...), data...)
	default:
		ret(stack, StatusBadArgument)
		return
	}
	ret(stack, StatusOK)
}

func hHTTPCall(v *vm, stack []uint64) {
	cluster, ok1 := v.bytes(u32(stack, 0), u32(stack, 1))
	hdrBuf, ok2 := v.bytes(u32(stack, 2), u32(stack, 3))
	body, ok3 := v.bytes(u32(stack, 4), u32(stack, 5))
	trlBuf, ok4 := v.bytes(u32(stack, 6), u32(stack, 7))
	timeoutMs, tokenPtr := u32(stack, 8), u32(stack, 9)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	// cpp-host writes the token first to validate the pointer.
	if !v.mem.WriteUint32Le(tokenPtr, 0) {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	if int32(timeoutMs) < 0 {
		ret(stack, StatusBadArgument)
		return
	}
	base, ok := v.h.opts.Clusters[string(cluster)] // looked up without a copy of the name
	if !ok {
		ret(stack, StatusBadArgument)
		return
	}
	hp, _ := DecodePairs(hdrBuf)
	headers := newHeaderMap(hp)
	for _, k := range [...]string{":path", ":method", ":authority"} {
		if _, ok := headers.get(k); !ok {
			ret(stack, StatusBadArgument)
			return
		}
	}
	if base == ClusterNoHosts {
		// Envoy's async client fails a request to a cluster without a host before it
		// returns the request (async_client_impl.cc), and Context::httpCall then returns
		// InternalFailure at once; no token is issued and no callback ever comes.
		ret(stack, StatusInternalFailure)
		return
	}
	tp, _ := DecodePairs(trlBuf)
	v.nextToken += 4 // Envoy: kCalloutIncrement, the low bits encode the callout type
	token := v.nextToken
	call := &callout{
		v: v, token: token, base: base, headers: headers,
		body: append([]byte(nil), body...), trailers: tp,
		timeout: time.Duration(timeoutMs) * time.Millisecond,
	}
	v.outbound = append(v.outbound, call)
	v.mem.WriteUint32Le(tokenPtr, token)
	ret(stack, StatusOK)
}

func hSetTickPeriod(v *vm, stack []uint64) {
	v.setTickPeriod(durationMs(u32(stack, 0)))
	ret(stack, StatusOK)
}

func hGetCurrentTime(v *vm, stack []uint64) {
	ret(stack, memStatus(v.mem.WriteUint64Le(u32(stack, 0), uint64(v.h.clock().UnixNano()))))
}

func hDefineMetric(v *vm, stack []uint64) {
	name, ok := v.str(u32(stack, 1), u32(stack, 2))
	if !ok {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	id, st := v.h.metrics.define(u32(stack, 0), name)
	if st != StatusOK {
		ret(stack, st)
		return
	}
	ret(stack, memStatus(v.mem.WriteUint32Le(u32(stack, 3), id)))
}

func hIncrementMetric(v *vm, stack []uint64) {
	ret(stack, v.h.metrics.increment(u32(stack, 0), int64(stack[1])))
}

func hRecordMetric(v *vm, stack []uint64) {
	ret(stack, v.h.metrics.record(u32(stack, 0), stack[1]))
}

func hGetMetric(v *vm, stack []uint64) {
	val, st := v.h.metrics.get(u32(stack, 0))
	if st != StatusOK {
		ret(stack, st)
		return
	}
	ret(stack, memStatus(v.mem.WriteUint64Le(u32(stack, 1), val)))
}

func hSetEffectiveContext(v *vm, stack []uint64) {
	id := u32(stack, 0)
	if (id == v.rootID && v.rootAlive) || v.streams[id] != nil {
		v.effective = id
		ret(stack, StatusOK)
		return
	}
	ret(stack, StatusBadArgument)
}

func hDone(v *vm, stack []uint64) {
	// Only a root context whose proxy_on_done returned false is waiting.
	if v.activeID() == v.rootID && v.rootDone && v.rootAlive {
		v.rootDone = false
		v.rootAlive = false
		id := v.rootID
		v.postReliably(func() { v.callback("proxy_on_delete", v.fn.onDelete, id, uint64(id)) })
		ret(stack, StatusOK)
		return
	}
	ret(stack, StatusNotFound)
}

func hCallForeignFunction(v *vm, stack []uint64) {
	_, ok1 := v.str(u32(stack, 0), u32(stack, 1))
	_, ok2 := v.bytes(u32(stack, 2), u32(stack, 3))
	if !ok1 || !ok2 {
		ret(stack, StatusInvalidMemoryAccess)
		return
	}
	ret(stack, StatusNotFound) // no foreign functions are registered
}

func hContinueStream(v *vm, stack []uint64) {
	t := u32(stack, 0)
	switch t {
	case streamRequest, streamResponse:
		if s := v.activeStream(); s != nil && !s.done {
			// Envoy's continueStream drops its pointers to the request maps
			// and body right away (for either direction), then continues
			// after the callback returns.
			s.avail[MapRequestHeaders], s.avail[MapRequestTrailers], s.bodyAvail[0] = false, false, false
			if s.paused && s.dir() == int(t) {
				s.continueReq[t] = true
				v.markDirty(s)
			}
		}
		ret(stack, StatusOK)
	case streamDownstream:
		ret(stack, StatusOK)
	case streamUpstream:
		ret(stack, StatusUnimplemented)
	default:
		ret(stack, StatusBadArgument)
	}
}

func hCloseStream(v *vm, stack []uint64) {
	switch t := u32(stack, 0); t {
	case streamRequest, streamResponse:
		if s := v.activeStream(); s != nil && !s.done {
			s.closeReq = true
			v.markDirty(s)
		}
		ret(stack, StatusOK)
	case streamDownstream, streamUpstream:
		ret(stack, StatusOK)
	default:
		ret(stack, StatusBadArgument)
	}
}

func hUnimplemented(_ *vm, stack []uint64) { ret(stack, StatusUnimplemented) }

func hPthreadEqual(_ *vm, stack []uint64) {
	if u32(stack, 0) == u32(stack, 1) {
		stack[0] = 1
	} else {
		stack[0] = 0
	}
}

func hNotifyMemoryGrowth(*vm, []uint64) {}
