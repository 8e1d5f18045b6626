package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// vmKey carries the *vm in the context passed to every call into a VM, which
// is how host functions find the VM that called them.
type vmKey struct{}

func vmFromContext(ctx context.Context) *vm {
	v, _ := ctx.Value(vmKey{}).(*vm)
	if v == nil {
		// Panicking is wazero's way to trap from a host function.
		panic(errors.New("wasmhost: host function called outside a VM call"))
	}
	return v
}

// guestExports caches the api.Function handles of one instance: looking an
// export up by name on every call costs about a quarter of a short callback.
type guestExports struct {
	initialize, main, start, malloc                                api.Function
	onContextCreate, onVMStart, onConfigure, onTick, onDone, onLog api.Function
	onDelete, onHTTPCallResponse, onQueueReady                     api.Function
	// filter holds the filter-chain callbacks per direction (streamRequest,
	// streamResponse), indexed like filterCallbacks.
	filter [2][3]api.Function
}

// Indexes of a direction's filter-chain callbacks, in the order Envoy calls them.
const (
	cbHeaders = iota
	cbBody
	cbTrailers
)

// filterCallbacks names the filter-chain callbacks of each direction. Both directions run
// the same state machine (see advance), so one table serves both.
var filterCallbacks = [2][3]string{
	{"proxy_on_request_headers", "proxy_on_request_body", "proxy_on_request_trailers"},
	{"proxy_on_response_headers", "proxy_on_response_body", "proxy_on_response_trailers"},
}

// vm is one instance of the module: a worker VM (idx >= 0) or the canary
// (idx -1). Everything but the atomics is owned by the goroutine currently
// driving the VM: New's goroutine until startLoop, then the event loop.
type vm struct {
	h   *Host
	idx int
	mod api.Module
	mem api.Memory
	fn  guestExports
	ctx context.Context

	stack      [16]uint64 // parameters and results of top-level calls
	allocStack [2]uint64  // the allocator may run while stack is in use

	restrict    restriction
	curCtx      uint32          // context of the running callback (0: the VM context)
	effective   uint32          // proxy_set_effective_context target (0: none)
	inConfigure bool            // the plugin configuration buffer exists only then
	trapReason  error           // a host-detected reason for the trap in progress
	stdio       [2]bytes.Buffer // partial stdout / stderr lines

	nextID    uint32
	rootID    uint32
	rootAlive bool
	rootDone  bool // proxy_on_done(root) returned false: waiting for proxy_done
	streams   map[uint32]*stream
	dirty     []*stream // streams with deferred actions to apply

	nextToken  uint32
	outbound   []*callout       // callouts the running guest call dispatched (see sendOutbound)
	callout    *calloutResponse // the response being delivered, if any
	statusCode uint32
	statusMsg  string

	tickPeriod time.Duration
	tickGen    uint64
	tickStop   func() bool // cancels the armed tick; nil when none is armed
	looping    bool

	failed    atomic.Bool
	abort     atomic.Bool
	callStart atomic.Int64
	ticks     atomic.Int64 // proxy_on_tick calls delivered
	busy      atomic.Int64 // nanoseconds spent in top-level calls into the guest

	tasks    chan func()
	quit     chan struct{}
	quitOnce sync.Once
}

// newVM instantiates the module, runs its start function and creates and
// configures the root context, as Envoy does for every VM.
func (h *Host) newVM(ctx context.Context, idx int) (*vm, error) {
	v := &vm{
		h:       h,
		idx:     idx,
		nextID:  1,
		streams: make(map[uint32]*stream),
		tasks:   make(chan func(), 1024),
		quit:    make(chan struct{}),
	}
	v.ctx = experimental.WithMemoryAllocator(context.WithValue(context.Background(), vmKey{}, v), memoryAllocator)
	name := fmt.Sprintf("worker %d", idx)
	if idx < 0 {
		name = "canary"
	}
	// The start section (if any) runs during instantiation and is a start
	// call too, so the restriction is in force from here on.
	v.restrict = restrictStart
	mod, err := h.rt.InstantiateModule(v.ctx, h.cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	v.restrict = restrictNone
	if err != nil {
		return nil, fmt.Errorf("wasmhost: %s: instantiate: %w", name, err)
	}
	v.mod = mod
	v.mem = mod.Memory()
	if v.mem == nil {
		_ = mod.Close(context.Background())
		return nil, fmt.Errorf("%w: %s: module exports no memory", ErrRefused, name)
	}
	e := func(n string) api.Function { return mod.ExportedFunction(n) }
	v.fn = guestExports{
		initialize: e("_initialize"), main: e("main"), start: e("_start"),
		malloc:          e("malloc"),
		onContextCreate: e("proxy_on_context_create"), onVMStart: e("proxy_on_vm_start"),
		onConfigure: e("proxy_on_configure"), onTick: e("proxy_on_tick"), onDone: e("proxy_on_done"),
		onLog: e("proxy_on_log"), onDelete: e("proxy_on_delete"),
		onHTTPCallResponse: e("proxy_on_http_call_response"), onQueueReady: e("proxy_on_queue_ready"),
	}
	for d, names := range filterCallbacks {
		for i, n := range names {
			v.fn.filter[d][i] = e(n)
		}
	}
	if v.fn.malloc == nil {
		v.fn.malloc = e("proxy_on_memory_allocate")
	}
	h.vmMu.Lock()
	h.live = append(h.live, v)
	h.vmMu.Unlock()

	if err := v.startAndConfigure(name); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

func (v *vm) startAndConfigure(name string) error {
	// Start: _initialize (then main if exported) for a reactor, else _start.
	v.restrict = restrictStart
	var err error
	startName := "_initialize"
	switch {
	case v.fn.initialize != nil:
		_, err = v.timedInvoke(v.fn.initialize)
		if err == nil && v.fn.main != nil {
			startName = "main"
			_, err = v.timedInvoke(v.fn.main, 0, 0)
		}
	case v.fn.start != nil:
		startName = "_start"
		_, err = v.timedInvoke(v.fn.start)
	}
	v.restrict = restrictNone
	if err != nil {
		v.markFailed(startName, 0, err)
		return v.guestError(name, startName+" trapped", v.lastErr(err))
	}

	v.rootID = v.allocID()
	v.rootAlive = true
	if _, ok := v.callback("proxy_on_context_create", v.fn.onContextCreate, v.rootID, uint64(v.rootID), 0); !ok {
		return v.guestError(name, "proxy_on_context_create(root) trapped", v.lastErr())
	}
	r, ok := v.callback("proxy_on_vm_start", v.fn.onVMStart, v.rootID, uint64(v.rootID), uint64(len(v.h.opts.VMConfig)))
	if !ok {
		return v.guestError(name, "proxy_on_vm_start trapped", v.lastErr())
	}
	if v.fn.onVMStart != nil && uint32(r) == 0 {
		return v.guestError(name, "proxy_on_vm_start returned false: the VM configuration was rejected", nil)
	}
	v.inConfigure = true
	r, ok = v.callback("proxy_on_configure", v.fn.onConfigure, v.rootID, uint64(v.rootID), uint64(len(v.h.opts.PluginConfig)))
	v.inConfigure = false
	if !ok {
		return v.guestError(name, "proxy_on_configure trapped", v.lastErr())
	}
	if v.fn.onConfigure != nil && uint32(r) == 0 {
		return v.guestError(name, "proxy_on_configure returned false: the plugin configuration was rejected", nil)
	}
	v.settle()
	return nil
}

// lastErr is the best description of the VM's last trap: the reason the
// host detected, else what wazero reported.
func (v *vm) lastErr(fallback ...error) error {
	if v.trapReason != nil {
		return v.trapReason
	}
	if len(fallback) > 0 {
		return fallback[0]
	}
	return errors.New("trap")
}

// guestError builds New's error: what failed, why, and the VM's warning and
// error log lines (the guest usually explains a rejected config there).
func (v *vm) guestError(name, what string, err error) error {
	var lines []LogEntry
	for _, e := range v.h.logs.snapshot() {
		if e.VM == v.idx && e.Level >= LogWarn {
			lines = append(lines, e)
		}
	}
	msg := fmt.Sprintf("wasmhost: %s: %s", name, what)
	if err != nil {
		msg += ": " + firstLine(err.Error())
	}
	if len(lines) > 40 {
		lines = append(lines[:20:20], lines[len(lines)-20:]...)
	}
	if len(lines) > 0 {
		msg += "\nVM log:" + formatLogs(lines, LogWarn)
	}
	return &guestErr{msg: msg, err: err}
}

// guestErr keeps the underlying error reachable for errors.Is/As without
// repeating its (possibly long, stack-trace carrying) text.
type guestErr struct {
	msg string
	err error
}

func (g *guestErr) Error() string { return g.msg }
func (g *guestErr) Unwrap() error { return g.err }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func (v *vm) allocID() uint32 {
	id := v.nextID
	v.nextID++
	return id
}

// invoke calls f with params using the VM's call stack and returns the first
// result. It must not be used re-entrantly (the allocator has its own stack).
func (v *vm) invoke(f api.Function, params ...uint64) (uint64, error) {
	copy(v.stack[:], params)
	if err := f.CallWithStack(v.ctx, v.stack[:]); err != nil {
		return 0, err
	}
	return v.stack[0], nil
}

// timedInvoke is invoke under the watchdog; it also flushes the guest's
// partial stdout/stderr lines when the call ends.
func (v *vm) timedInvoke(f api.Function, params ...uint64) (uint64, error) {
	start := time.Now().UnixNano()
	if v.h.opts.CallTimeout > 0 {
		v.callStart.Store(start)
	}
	r, err := v.invoke(f, params...)
	if v.h.opts.CallTimeout > 0 {
		v.callStart.Store(0)
	}
	v.busy.Add(time.Now().UnixNano() - start)
	if len(v.outbound) > 0 {
		v.sendOutbound()
	}
	if v.stdio[0].Len() > 0 || v.stdio[1].Len() > 0 {
		v.emitStdio(1, true)
		v.emitStdio(2, true)
	}
	return r, err
}

// callback calls a proxy_on_* export on behalf of context ctxID. A missing
// export is a no-op returning 0 (Continue / void), as in cpp-host. It
// returns ok=false when the VM is failed or the call trapped (the VM is then
// failed: Envoy does not call into a VM after a runtime error).
func (v *vm) callback(name string, f api.Function, ctxID uint32, params ...uint64) (uint64, bool) {
	if v.failed.Load() {
		return 0, false
	}
	if f == nil {
		return 0, true
	}
	prevCtx, prevEff := v.curCtx, v.effective
	v.curCtx, v.effective = ctxID, 0
	r, err := v.timedInvoke(f, params...)
	v.curCtx, v.effective = prevCtx, prevEff
	if err != nil {
		v.markFailed(name, ctxID, err)
		return 0, false
	}
	return r, true
}

// markFailed records a trap: the VM is failed from now on, like Envoy after
// a runtime error with FAIL_CLOSED.
func (v *vm) markFailed(name string, ctxID uint32, err error) {
	if v.trapReason == nil {
		v.trapReason = err
	}
	v.failed.Store(true)
	v.h.traps.Add(1)
	reason := firstLine(err.Error())
	if v.trapReason != err {
		reason = v.trapReason.Error()
	}
	v.h.log(v, ctxID, LogCritical, SourceHost, fmt.Sprintf("wasm trap in %s: %s; the VM is failed", name, reason))
}

// trap aborts the running guest call from inside a host function.
func (v *vm) trap(err error) {
	if v.trapReason == nil {
		v.trapReason = err
	}
	// Panicking is wazero's way to trap from a host function: the panic
	// unwinds the guest and surfaces as the error of the outer call.
	panic(err)
}

// enter runs before every host function: restricted-call and watchdog checks.
func (v *vm) enter(f *hostFunc) {
	f.calls.Add(1)
	switch v.restrict {
	case restrictNone:
	case restrictStart:
		if !f.allowStart {
			v.trapRestricted(f)
		}
	case restrictAlloc:
		if !f.allowAlloc && !(f.allowAlloc139 && v.h.opts.PollOneoff != PollOneoffEnvoy138) {
			v.trapRestricted(f)
		}
	}
	if v.abort.Load() {
		v.trap(fmt.Errorf("call exceeded CallTimeout %v", v.h.opts.CallTimeout))
	}
}

func (v *vm) trapRestricted(f *hostFunc) {
	v.trap(fmt.Errorf("restricted call: %s is not allowed during %s (Envoy traps)", f, v.restrict))
}

// alloc asks the guest allocator for size bytes. The allocator may only call
// proxy_log, fd_write and clock_time_get, and from Envoy 1.39 on poll_oneoff.
// A trap inside it propagates to the
// callback that caused the allocation.
func (v *vm) alloc(size uint32) (uint32, Status) {
	prev := v.restrict
	v.restrict = restrictAlloc
	v.allocStack[0] = uint64(size)
	v.h.allocs.Add(1)
	err := v.fn.malloc.CallWithStack(v.ctx, v.allocStack[:])
	v.restrict = prev
	if err != nil {
		if v.trapReason == nil {
			v.trapReason = fmt.Errorf("allocator trapped: %s", firstLine(err.Error()))
		}
		panic(err)
	}
	p := uint32(v.allocStack[0])
	if p == 0 || uint64(p)+uint64(size) > uint64(v.mem.Size()) {
		return 0, StatusInvalidMemoryAccess
	}
	return p, StatusOK
}

// reserveOut is the guest side of cpp-host's copyToPointerSize: it allocates n bytes in the
// guest, writes their pointer and size to ptrPtr and sizePtr, and returns the buffer for the
// caller to fill (a view valid until the next allocation). n == 0 writes (0, 0) without
// allocating.
func (v *vm) reserveOut(n int, ptrPtr, sizePtr uint32) ([]byte, Status) {
	var p uint32
	var buf []byte
	if n > 0 {
		var st Status
		if p, st = v.alloc(uint32(n)); st != StatusOK {
			return nil, st
		}
		var ok bool
		if buf, ok = v.mem.Read(p, uint32(n)); !ok {
			return nil, StatusInvalidMemoryAccess
		}
	}
	if !v.mem.WriteUint32Le(ptrPtr, p) || !v.mem.WriteUint32Le(sizePtr, uint32(n)) {
		return nil, StatusInvalidMemoryAccess
	}
	return buf, StatusOK
}

// copyOut is cpp-host's copyToPointerSize for a value: allocate in the guest, copy data,
// write the pointer and size. Empty data writes (0, 0) without allocating.
func copyOut[T string | []byte](v *vm, data T, ptrPtr, sizePtr uint32) Status {
	buf, st := v.reserveOut(len(data), ptrPtr, sizePtr)
	copy(buf, data)
	return st
}

// copyOutPairs serializes pairs straight into guest memory. An empty map is copied as ""
// (pointer 0, size 0), as cpp-host's getPairs does, not as a zero count.
func (v *vm) copyOutPairs(pairs [][2]string, ptrPtr, sizePtr uint32) Status {
	n := 0
	if len(pairs) > 0 {
		n = pairsSize(pairs)
	}
	buf, st := v.reserveOut(n, ptrPtr, sizePtr)
	if st == StatusOK && n > 0 {
		marshalPairs(buf, pairs)
	}
	return st
}

// bytes returns a view of guest memory, valid until the next allocation.
func (v *vm) bytes(ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	return v.mem.Read(ptr, size)
}

// str copies guest memory into a string.
func (v *vm) str(ptr, size uint32) (string, bool) {
	b, ok := v.bytes(ptr, size)
	return string(b), ok
}

// activeID is the context host calls act on: the effective context if one
// was set and still exists, else the callback's own context (cpp-host's
// ContextOrEffectiveContext).
func (v *vm) activeID() uint32 {
	if v.effective != 0 {
		if v.effective == v.rootID || v.streams[v.effective] != nil {
			return v.effective
		}
	}
	return v.curCtx
}

// activeStream is the stream host calls act on, or nil for the root / VM
// context.
func (v *vm) activeStream() *stream {
	return v.streams[v.activeID()]
}

// startLoop starts the VM's event loop: from now on every call into this VM
// runs on that goroutine, so a VM is single-threaded like an Envoy worker.
func (v *vm) startLoop() {
	v.looping = true
	v.armTick()
	v.h.wg.Add(1)
	go func() {
		defer v.h.wg.Done()
		for {
			select {
			case t := <-v.tasks:
				t()
			case <-v.quit:
				return
			}
		}
	}()
}

// post queues f on the VM's loop; false if the VM stopped or ctx ended first.
func (v *vm) post(ctx context.Context, f func()) bool {
	select {
	case v.tasks <- f:
		return true
	case <-v.quit:
		return false
	case <-ctx.Done():
		return false
	}
}

// postReliably queues f even when the queue is momentarily full, without
// blocking the caller; the helper goroutine ends at Close at the latest.
func (v *vm) postReliably(f func()) {
	select {
	case v.tasks <- f:
		return
	default:
	}
	v.h.wg.Add(1)
	go func() {
		defer v.h.wg.Done()
		v.post(v.h.baseCtx, f)
	}()
}

// shutdown tears the VM down on its loop (open streams, then the root
// context) and stops the loop.
func (v *vm) shutdown(ctx context.Context) {
	done := make(chan struct{})
	if v.post(ctx, func() { v.teardownAll(); close(done) }) {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	v.quitOnce.Do(func() { close(v.quit) })
}

func (v *vm) teardownAll() {
	v.tickGen++
	if v.tickStop != nil {
		v.tickStop()
	}
	for _, s := range v.streams {
		if !s.done {
			v.teardown(s, ErrClosed)
		}
	}
	if v.rootAlive && !v.failed.Load() {
		r, ok := v.callback("proxy_on_done", v.fn.onDone, v.rootID, uint64(v.rootID))
		if ok && (v.fn.onDone == nil || uint32(r) != 0) {
			v.callback("proxy_on_delete", v.fn.onDelete, v.rootID, uint64(v.rootID))
			v.rootAlive = false
		} else if ok {
			v.rootDone = true
		}
	}
}

// close releases the instance (used for the canary and on failed starts).
func (v *vm) close() {
	v.quitOnce.Do(func() { close(v.quit) })
	v.tickGen++
	if v.tickStop != nil {
		v.tickStop()
	}
	h := v.h
	h.vmMu.Lock()
	for i, o := range h.live {
		if o == v {
			h.live = append(h.live[:i], h.live[i+1:]...)
			break
		}
	}
	h.vmMu.Unlock()
	if v.mod != nil {
		_ = v.mod.Close(context.Background())
	}
}

// setTickPeriod implements proxy_set_tick_period_milliseconds for the VM's
// root context.
func (v *vm) setTickPeriod(d time.Duration) {
	v.tickPeriod = d
	v.tickGen++
	if v.tickStop != nil {
		v.tickStop()
		v.tickStop = nil
	}
	if v.looping {
		v.armTick()
	}
}

// armTick schedules the next tick one period from now. Ticks are re-armed
// after the callback returns, so a slow on_tick delays, never overlaps.
func (v *vm) armTick() {
	if v.tickPeriod <= 0 {
		return
	}
	gen := v.tickGen
	v.tickStop = v.h.afterFunc(v.tickPeriod, func() {
		if v.h.vclock == nil {
			v.post(v.h.baseCtx, func() { v.tick(gen) })
			return
		}
		// On the virtual clock the tick has run (and re-armed) by the time Advance returns,
		// so that a test sees its effects at once and the next tick is due at an exact
		// instant.
		done := make(chan struct{})
		if v.post(v.h.baseCtx, func() { v.tick(gen); close(done) }) {
			select {
			case <-done:
			case <-v.quit:
			}
		}
	})
}

func (v *vm) tick(gen uint64) {
	if gen != v.tickGen || !v.rootAlive || v.failed.Load() {
		return
	}
	v.ticks.Add(1)
	v.callback("proxy_on_tick", v.fn.onTick, v.rootID, uint64(v.rootID))
	v.settle()
	if gen == v.tickGen && !v.failed.Load() {
		v.armTick()
	}
}
