//go:build wasip1

package abi

import (
	"runtime"
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The dispatcher: one VM context, its root (plugin) contexts and their HTTP stream contexts.
// A Wasm VM is single-threaded (Envoy runs one VM per worker thread), so no locking is needed.
var (
	vmContext types.VMContext
	roots     = map[uint32]*rootContext{}
	// streams holds its entries by value: a pointer would cost an allocation per request.
	streams = map[uint32]streamContext{}
	// last is the stream created most recently (lastID 0: none, or it was deleted), never in
	// streams too. A worker usually runs one stream at a time, and a map insertion or deletion
	// costs a few hundred nanoseconds in a Wasm VM: such a stream never enters the map. A
	// stream created while last holds another moves that one into the map first.
	last   streamContext
	lastID uint32
	// lastRoot is the root context that created a stream most recently (lastRootID 0: none),
	// found by the next stream of the same root without a map lookup.
	lastRoot   *rootContext
	lastRootID uint32
	// active is the context whose callback is running; callouts are registered against it so
	// that the response can be routed back to the stream that asked.
	active uint32
)

type rootContext struct {
	plugin types.PluginContext
	// callouts holds the callouts in flight but the one dispatched last, which is in
	// lastCallout (lastToken 0: none, or it has been answered), as streams and last do.
	callouts    map[uint32]callout
	lastCallout callout
	lastToken   uint32
}

// addCallout files callout c under token.
func (r *rootContext) addCallout(token uint32, c callout) {
	if r.lastToken != 0 {
		r.callouts[r.lastToken] = r.lastCallout
	}
	r.lastCallout, r.lastToken = c, token
}

// takeCallout removes the callout filed under token and returns it, if there is one.
func (r *rootContext) takeCallout(token uint32) (callout, bool) {
	if token == r.lastToken && token != 0 {
		c := r.lastCallout
		r.lastCallout, r.lastToken = callout{}, 0
		return c, true
	}
	c, ok := r.callouts[token]
	if ok {
		delete(r.callouts, token)
	}
	return c, ok
}

type streamContext struct {
	http types.HttpContext
	root uint32
}

type callout struct {
	callback func(numHeaders, bodySize, numTrailers int)
	caller   uint32
	// always is set by DispatchHttpCallAlways: the callback runs, on the root context, also
	// when the caller is gone.
	always bool
}

// SetVMContext registers the filter. Call it from init(): a wasip1 reactor never runs main.
func SetVMContext(ctx types.VMContext) { vmContext = ctx }

// registerCallout files the callback of callout token under the root context of the calling
// stream (or the calling root), remembering the caller for the answer.
func registerCallout(token uint32, cb func(int, int, int), always bool) {
	rootID := active
	if s, ok := lookupStream(active); ok {
		rootID = s.root
	}
	if r, ok := rootOf(rootID); ok {
		r.addCallout(token, callout{callback: cb, caller: active, always: always})
	}
}

// recoverExport, which every export defers, turns a panic into an error log: a panic that
// escapes a wasmexport traps, which in Envoy fails the stream (or the VM with FAIL_RELOAD).
func recoverExport(name string, contextID uint32) {
	if r := recover(); r != nil {
		msg := "panic in " + name + " (context " + strconv.FormatUint(uint64(contextID), 10) + "): " + anyString(r) + "\n" + string(stack())
		logAt(levelError, msg)
	}
}

// stack returns the calling goroutine's stack trace, as runtime/debug.Stack does; that
// package imports fmt, which the module does not link.
func stack() []byte {
	buf := make([]byte, 1024)
	for {
		n := runtime.Stack(buf, false)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

func anyString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case error:
		return x.Error()
	default:
		return "non-error panic value"
	}
}

//go:wasmexport proxy_abi_version_0_2_1
func proxyABIVersion021() {}

//go:wasmexport proxy_on_context_create
func proxyOnContextCreate(contextID, parentID uint32) {
	defer recoverExport("proxy_on_context_create", contextID)
	if parentID == 0 {
		if vmContext == nil {
			return
		}
		if contextID == lastRootID {
			lastRoot, lastRootID = nil, 0
		}
		roots[contextID] = &rootContext{
			plugin:   vmContext.NewPluginContext(contextID),
			callouts: map[uint32]callout{},
		}
		return
	}
	r := lastRoot
	if parentID != lastRootID || r == nil {
		var ok bool
		if r, ok = roots[parentID]; !ok {
			return
		}
		lastRoot, lastRootID = r, parentID
	}
	if r.plugin == nil {
		return
	}
	active = contextID
	if h := r.plugin.NewHttpContext(contextID); h != nil {
		if lastID != 0 {
			// Another stream is still open: it moves to the map (see last).
			streams[lastID] = last
		}
		last, lastID = streamContext{http: h, root: parentID}, contextID
	}
}

// rootOf returns the root context rootID, if it exists.
func rootOf(rootID uint32) (*rootContext, bool) {
	if rootID == lastRootID && lastRoot != nil {
		return lastRoot, true
	}
	r, ok := roots[rootID]
	return r, ok
}

// lookupStream returns the stream contextID, if it exists.
func lookupStream(contextID uint32) (streamContext, bool) {
	if contextID == lastID && contextID != 0 {
		return last, true
	}
	s, ok := streams[contextID]
	return s, ok
}

//go:wasmexport proxy_on_vm_start
func proxyOnVMStart(rootID, vmConfigSize uint32) (ok uint32) {
	defer recoverExport("proxy_on_vm_start", rootID)
	if vmContext == nil {
		return 0
	}
	active = rootID
	if vmContext.OnVMStart(int(vmConfigSize)) {
		return 1
	}
	return 0
}

//go:wasmexport proxy_on_configure
func proxyOnConfigure(rootID, pluginConfigSize uint32) (ok uint32) {
	// A panic while configuring refuses the configuration (ok stays 0): nothing that failed
	// half-way must serve traffic.
	defer recoverExport("proxy_on_configure", rootID)
	r, found := roots[rootID]
	if !found || r.plugin == nil {
		return 0
	}
	active = rootID
	if r.plugin.OnPluginStart(int(pluginConfigSize)) {
		return 1
	}
	return 0
}

//go:wasmexport proxy_on_tick
func proxyOnTick(rootID uint32) {
	defer recoverExport("proxy_on_tick", rootID)
	if r, ok := roots[rootID]; ok && r.plugin != nil {
		active = rootID
		r.plugin.OnTick()
	}
}

//go:wasmexport proxy_on_queue_ready
func proxyOnQueueReady(rootID, queueID uint32) {
	defer recoverExport("proxy_on_queue_ready", rootID)
	if r, ok := roots[rootID]; ok && r.plugin != nil {
		active = rootID
		r.plugin.OnQueueReady(queueID)
	}
}

// proxy_on_done and proxy_on_delete reach this module for every stream, and for the last
// stream (nearly always the case) only compare and clear a few variables, which cannot panic:
// that fast path runs without a deferred recover, which makes a function several times bigger
// (see filter/doc.go), and the rest, which can panic, is a function of its own that defers one.

//go:wasmexport proxy_on_done
func proxyOnDone(contextID uint32) (done uint32) {
	if contextID == lastID && contextID != 0 {
		return 1 // a stream: nothing to do
	}
	return rootDone(contextID)
}

// rootDone is proxy_on_done for a context other than the last stream.
func rootDone(contextID uint32) (done uint32) {
	done = 1
	defer recoverExport("proxy_on_done", contextID)
	if r, ok := roots[contextID]; ok && r.plugin != nil {
		active = contextID
		if !r.plugin.OnPluginDone() {
			return 0
		}
	}
	return 1
}

//go:wasmexport proxy_on_log
func proxyOnLog(contextID uint32) {
	// Envoy calls proxy_on_log before proxy_on_done for streams, so this is the one place
	// where a stream's final bookkeeping sees the complete request and response.
	onStream(opLog, contextID, 0, 0)
}

//go:wasmexport proxy_on_delete
func proxyOnDelete(contextID uint32) {
	if contextID == lastID && contextID != 0 {
		// A stream, never a root, and not in the streams map (see last).
		last, lastID = streamContext{}, 0
		return
	}
	deleteContext(contextID)
}

// deleteContext is proxy_on_delete for a context other than the last stream.
func deleteContext(contextID uint32) {
	defer recoverExport("proxy_on_delete", contextID)
	delete(streams, contextID)
	delete(roots, contextID)
	if contextID == lastRootID {
		lastRoot, lastRootID = nil, 0
	}
}

// The stream callbacks every request calls (request headers, response headers, log) share one
// dispatcher, onStream, with one deferred recover: one function with a defer is much smaller
// than three for V8 to compile on a VM's first request (see filter/doc.go).
const (
	opRequestHeaders = iota
	opResponseHeaders
	opLog
)

// streamExports names the exports onStream serves, by op, for the log of a recovered panic.
var streamExports = [...]string{"proxy_on_request_headers", "proxy_on_response_headers", "proxy_on_log"}

// onStream runs the stream callback op of stream contextID, with the export's numHeaders and
// endOfStream (0 for proxy_on_log), and returns the action (0, Continue, for proxy_on_log, an
// unknown stream or a recovered panic).
func onStream(op uint8, contextID, numHeaders, endOfStream uint32) (action uint32) {
	defer recoverExport(streamExports[op], contextID)
	// One return: the compiler writes the deferred call out at each return.
	action = uint32(types.ActionContinue)
	s, ok := lookupStream(contextID)
	var h types.HttpContext
	if ok {
		active, h = contextID, s.http
	}
	switch {
	case h == nil:
	case op == opRequestHeaders:
		action = uint32(h.OnHttpRequestHeaders(int(numHeaders), endOfStream != 0))
	case op == opResponseHeaders:
		action = uint32(h.OnHttpResponseHeaders(int(numHeaders), endOfStream != 0))
	default:
		h.OnHttpStreamDone()
	}
	return action
}

func stream(contextID uint32) types.HttpContext {
	s, ok := lookupStream(contextID)
	if !ok {
		return nil
	}
	active = contextID
	return s.http
}

// Stream callbacks return Continue after a recovered panic: the filter applies its own failure
// mode before a panic can get this far, so this is the last line of defence, and an error log
// makes it visible.

//go:wasmexport proxy_on_request_headers
func proxyOnRequestHeaders(contextID, numHeaders, endOfStream uint32) (action uint32) {
	return onStream(opRequestHeaders, contextID, numHeaders, endOfStream)
}

//go:wasmexport proxy_on_request_body
func proxyOnRequestBody(contextID, bodySize, endOfStream uint32) (action uint32) {
	defer recoverExport("proxy_on_request_body", contextID)
	if h := stream(contextID); h != nil {
		return uint32(h.OnHttpRequestBody(int(bodySize), endOfStream != 0))
	}
	return uint32(types.ActionContinue)
}

//go:wasmexport proxy_on_request_trailers
func proxyOnRequestTrailers(contextID, numTrailers uint32) (action uint32) {
	defer recoverExport("proxy_on_request_trailers", contextID)
	if h := stream(contextID); h != nil {
		return uint32(h.OnHttpRequestTrailers(int(numTrailers)))
	}
	return uint32(types.ActionContinue)
}

//go:wasmexport proxy_on_response_headers
func proxyOnResponseHeaders(contextID, numHeaders, endOfStream uint32) (action uint32) {
	return onStream(opResponseHeaders, contextID, numHeaders, endOfStream)
}

//go:wasmexport proxy_on_response_body
func proxyOnResponseBody(contextID, bodySize, endOfStream uint32) (action uint32) {
	defer recoverExport("proxy_on_response_body", contextID)
	if h := stream(contextID); h != nil {
		return uint32(h.OnHttpResponseBody(int(bodySize), endOfStream != 0))
	}
	return uint32(types.ActionContinue)
}

//go:wasmexport proxy_on_response_trailers
func proxyOnResponseTrailers(contextID, numTrailers uint32) (action uint32) {
	defer recoverExport("proxy_on_response_trailers", contextID)
	if h := stream(contextID); h != nil {
		return uint32(h.OnHttpResponseTrailers(int(numTrailers)))
	}
	return uint32(types.ActionContinue)
}

//go:wasmexport proxy_on_http_call_response
func proxyOnHTTPCallResponse(rootID, token, numHeaders, bodySize, numTrailers uint32) {
	defer recoverExport("proxy_on_http_call_response", rootID)
	r, ok := rootOf(rootID)
	if !ok {
		return
	}
	c, ok := r.takeCallout(token)
	if !ok {
		return
	}
	if c.caller != rootID {
		// The stream may have been torn down while its callout was in flight: Envoy does not
		// cancel the callout, so the response can arrive for a dead stream. Acting on it would
		// touch a context the host has already deleted.
		if _, alive := lookupStream(c.caller); !alive {
			if c.always {
				// Envoy calls this on the root context, which stays the effective one.
				active = rootID
				c.callback(int(numHeaders), int(bodySize), int(numTrailers))
			}
			return
		}
		if hostSetEffectiveContext(c.caller) != statusOK {
			return
		}
	}
	active = c.caller
	c.callback(int(numHeaders), int(bodySize), int(numTrailers))
}
