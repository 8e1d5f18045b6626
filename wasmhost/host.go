// Package wasmhost is a proxy-wasm host built on wazero that behaves like
// Envoy (>= 1.39, V8 runtime) for the parts of the ABI an HTTP filter uses.
// Envoy cannot run on the development machines; tests, benchmarks and the
// local runner (cmd/ratelimit-host) load the compiled filter here instead.
//
// The facts it reproduces are listed in ENVOY-HOST.md next to this file and were
// checked against proxy-wasm-cpp-host and Envoy's source: load-time checks,
// one VM per worker plus a canary, the restricted start and allocator calls,
// Envoy's WASI subset, the shared-data CAS rules, callout response shapes,
// deferred continue/local-response, ticks, metrics, properties and the
// FAIL_CLOSED reaction to traps. Deviations are documented where they occur.
package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
)

// ClusterNoHosts, as a cluster's URL in Options.Clusters, models a cluster with no host to
// send to (no endpoints, or none healthy in a way that fails the stream at once): Envoy then
// fails proxy_http_call synchronously with InternalFailure and never calls back.
const ClusterNoHosts = "nohosts:"

// Options configures a Host. The zero value is usable: one worker, no
// configuration, Envoy >= 1.39 poll_oneoff, log level info, real time.
type Options struct {
	// Workers is the number of worker VMs (Envoy's --concurrency). Default 1.
	Workers int
	// VMID is vm_config.vm_id: the shared-data namespace and plugin_vm_id.
	VMID string
	// PluginName is the plugin's name (plugin_name property).
	PluginName string
	// RootID is the plugin's root_id (plugin_root_id property).
	RootID string
	// VMConfig is vm_config.configuration (buffer type 6).
	VMConfig []byte
	// PluginConfig is the plugin configuration (buffer type 7).
	PluginConfig []byte
	// Env is vm_config.environment_variables, visible through environ_get.
	Env map[string]string
	// Clusters maps a cluster name to the base URL that proxy_http_call
	// reaches, e.g. "redis" -> "http://127.0.0.1:7379". The special URL
	// "reset:" makes every callout to that cluster fail like an Envoy stream
	// reset: proxy_on_http_call_response(root, token, 0, 0, 0) and
	// proxy_get_status returning BrokenConnection (11). The special URL
	// ClusterNoHosts ("nohosts:") is a cluster that exists but has no host at
	// send time: proxy_http_call itself returns InternalFailure (10) and no
	// callback ever comes, as in Envoy.
	Clusters map[string]string
	// Routes is a minimal route table used by Handler: the first route whose
	// PathPrefix matches supplies the xds.* properties. Do uses the values of
	// the Request instead.
	Routes []Route
	// PollOneoff selects Envoy's poll_oneoff behaviour (default >= 1.39).
	PollOneoff PollOneoffMode
	// Clock supplies wall-clock time (proxy_get_current_time_nanoseconds and
	// WASI realtime). The monotonic WASI clock always follows real time so
	// that the Go runtime's timers keep working. Default time.Now, or
	// VirtualClock.Now when VirtualClock is set.
	Clock func() time.Time
	// VirtualClock, when set, is the host's time for everything the filter
	// can observe: Clock (unless Clock is set too), the proxy_on_tick timers,
	// callout timeouts and UpstreamResponse.Delay. Nothing timed happens until
	// the test advances it. Default nil: real time.
	VirtualClock *VirtualClock
	// LogLevel is the Envoy log level: proxy_get_log_level returns it and
	// entries below it are not recorded, like ENVOY_LOG. Default LogInfo.
	LogLevel LogLevel
	// LogWriter, when set, receives every recorded log entry as a line.
	LogWriter io.Writer
	// MaxLogEntries bounds the in-memory log (default 10000; oldest dropped).
	MaxLogEntries int
	// SharedData is the store proxy_get/set_shared_data use. Nil means the
	// process-wide store, as in one Envoy process; give two Hosts different
	// stores to model two independent proxies.
	SharedData *SharedData
	// MetricStore is where the guest's metrics live. Nil gives the Host a
	// store of its own; give the Hosts that model one Envoy process the same
	// store, since Envoy's stats are process-wide (plugins defining the same
	// name share one stat).
	MetricStore *MetricStore
	// CompilationCache overrides the compilation cache; nil uses
	// SharedCompilationCache(). The Hosts of one cache share a wazero runtime
	// and the modules compiled in it for the life of the process.
	CompilationCache wazero.CompilationCache
	// CallTimeout bounds one call into a VM (a guard for tests, Envoy has
	// none). When exceeded, the next host call the guest makes traps and the
	// VM fails; a guest spinning without host calls cannot be interrupted.
	// Default 30s; negative disables the watchdog.
	CallTimeout time.Duration
	// UpstreamTimeout bounds the forwarded request in Handler (Envoy's route
	// timeout, default 15s) and produces a 504 when exceeded.
	UpstreamTimeout time.Duration
	// MaxBodyBytes bounds request and response bodies the Handler buffers
	// (default 16 MiB). Unlike Envoy, which streams bodies no filter buffers,
	// the Handler buffers every body: a larger request is answered 413, a
	// larger upstream response 500, as Envoy answers a response too large to
	// buffer.
	MaxBodyBytes int64
}

// Route is one entry of the Handler's route table.
type Route struct {
	PathPrefix    string // matched against the request path, in table order
	Name          string // xds.route_name
	VirtualHost   string // xds.virtual_host_name
	Cluster       string // xds.cluster_name
	RouteMetadata []byte // xds.route_metadata (serialized envoy.config.core.v3.Metadata)
}

// Host runs a proxy-wasm module in Workers VMs. All methods are safe for
// concurrent use.
type Host struct {
	opts      Options
	rt        wazero.Runtime // shared with the other Hosts of the cache (see moduleRuntime)
	cm        wazero.CompiledModule
	abi       abiVersion
	table     hostTable
	funcs     []*hostFunc // table's functions in hostFuncNames order, for the host modules
	vms       []*vm
	shared    *SharedData
	metrics   *metrics
	logs      *logSink
	clock     func() time.Time
	vclock    *VirtualClock // nil: real timers
	transport *http.Transport
	envList   []string // "k=v", sorted

	// callouts hands a callout to an idle callout worker (see startCallout).
	callouts chan *callout

	vmMu sync.Mutex
	live []*vm // every open VM, canary included (for the watchdog)

	rr       atomic.Uint64
	traps    atomic.Int64
	allocs   atomic.Int64 // calls of the guest's allocator (see Stats.AllocatorCalls)
	baseCtx  context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup // VM loops, callouts, watchdog
	closed   chan struct{}
	closeMu  sync.Once
	closeErr error
}

// newTransport is the transport for callouts and forwarded requests. Envoy
// neither asks for compression nor decompresses bodies, so neither does it; and
// it connects to a cluster's own address, never through a proxy named in the
// environment (HTTP_PROXY), whose lookup would also run on every callout.
// Requests go straight to its RoundTrip: Envoy's async client and router do not
// follow redirects, so an http.Client would only add the copy of every request's
// headers it keeps for redirects.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	t.Proxy = nil
	t.MaxIdleConnsPerHost = 64
	return t
}

// noDefaultUserAgent stops net/http from adding its own User-Agent, which
// Envoy would not send.
func noDefaultUserAgent(h http.Header) {
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""}
	}
}

// moduleRuntime is the wazero runtime of every Host of the process that uses one
// compilation cache, with the host modules instantiated once and the modules
// compiled in it. wazero decodes and validates a
// module on every CompileModule, found in the cache or not (about 45 ms of CPU
// for the filter's 4 MB module, more than starting a VM); a Host of a module
// the process already runs skips that. Each Host's VMs are anonymous module
// instances of their own; the host functions find their VM, and through it
// their Host, in the context of each call.
type moduleRuntime struct {
	rt wazero.Runtime

	mu sync.Mutex
	// compiled holds the modules by their length; a module is found by comparing
	// its bytes (a memory compare, cheaper than hashing them on every New).
	compiled map[int][]*compiledModule
}

// compiledModule is a module (a copy of its bytes) compiled once, or the error
// compiling it gave.
type compiledModule struct {
	wasm []byte
	once sync.Once
	cm   wazero.CompiledModule
	err  error
}

var (
	runtimesMu sync.Mutex
	runtimes   = map[wazero.CompilationCache]*moduleRuntime{}
)

// runtimeFor returns the runtime of cache, creating it on first use.
func runtimeFor(cache wazero.CompilationCache) (*moduleRuntime, error) {
	runtimesMu.Lock()
	defer runtimesMu.Unlock()
	if r, ok := runtimes[cache]; ok {
		return r, nil
	}
	ctx := context.Background()
	// V8 caps a Wasm memory at 1 GiB (16384 pages); so does this host.
	cfg := wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache).WithMemoryLimitPages(16384)
	r := &moduleRuntime{rt: wazero.NewRuntimeWithConfig(ctx, cfg), compiled: map[int][]*compiledModule{}}
	if err := instantiateHostModules(ctx, r.rt); err != nil {
		_ = r.rt.Close(ctx)
		return nil, err
	}
	runtimes[cache] = r
	return r, nil
}

// compile returns wasm compiled in the runtime, compiling it on first use.
func (r *moduleRuntime) compile(wasm []byte) (wazero.CompiledModule, error) {
	r.mu.Lock()
	var c *compiledModule
	for _, o := range r.compiled[len(wasm)] {
		if bytes.Equal(o.wasm, wasm) {
			c = o
			break
		}
	}
	if c == nil {
		c = &compiledModule{wasm: bytes.Clone(wasm)}
		r.compiled[len(wasm)] = append(r.compiled[len(wasm)], c)
	}
	r.mu.Unlock()
	// The module compiled is wasm with its data segments merged: the same memory image, and a
	// VM starts several times faster (see mergeDataSegments).
	c.once.Do(func() { c.cm, c.err = r.rt.CompileModule(context.Background(), mergeDataSegments(c.wasm)) })
	return c.cm, c.err
}

// ErrClosed is returned by calls on a closed Host.
var ErrClosed = errors.New("wasmhost: host closed")

var (
	sharedCacheOnce sync.Once
	sharedCache     wazero.CompilationCache
)

// SharedCompilationCache returns the process-wide compilation cache every
// Host uses by default. It is backed by a directory under os.UserCacheDir()
// (falling back to the temp dir), so a second process compiles in ~20 ms
// instead of ~0.4 s.
func SharedCompilationCache() wazero.CompilationCache {
	sharedCacheOnce.Do(func() {
		dir, err := os.UserCacheDir()
		if err != nil || dir == "" {
			dir = os.TempDir()
		}
		c, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "ratelimit-wasmhost"))
		if err != nil {
			// An unwritable cache dir must not stop the host: fall back to an
			// in-memory cache shared by the Hosts of this process.
			c = wazero.NewCompilationCache()
		}
		sharedCache = c
	})
	return sharedCache
}

// New compiles wasm, runs a canary VM through start and configure (and closes
// it), then starts opts.Workers worker VMs, each with its own event loop. A
// module Envoy would refuse, a failing start, or a configuration the plugin
// rejects makes New fail with the reason and the guest's error logs.
func New(ctx context.Context, wasm []byte, opts Options) (*Host, error) {
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
		if opts.VirtualClock != nil {
			opts.Clock = opts.VirtualClock.Now
		}
	}
	if opts.LogLevel == 0 {
		opts.LogLevel = LogInfo
	}
	if opts.MaxLogEntries <= 0 {
		opts.MaxLogEntries = 10000
	}
	if opts.CallTimeout == 0 {
		opts.CallTimeout = 30 * time.Second
	}
	if opts.UpstreamTimeout <= 0 {
		opts.UpstreamTimeout = 15 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 16 << 20
	}
	h := &Host{
		opts:      opts,
		table:     buildHostTable(),
		funcs:     make([]*hostFunc, len(hostFuncNames)),
		shared:    opts.SharedData,
		metrics:   metricsOf(opts.MetricStore),
		logs:      &logSink{max: opts.MaxLogEntries, w: opts.LogWriter},
		clock:     opts.Clock,
		vclock:    opts.VirtualClock,
		closed:    make(chan struct{}),
		transport: newTransport(),
	}
	h.callouts = make(chan *callout)
	for i, name := range hostFuncNames {
		h.funcs[i] = h.table[name]
	}
	if h.shared == nil {
		h.shared = processSharedData
	}
	for k, v := range opts.Env {
		h.envList = append(h.envList, k+"="+v)
	}
	sort.Strings(h.envList)
	h.baseCtx, h.cancel = context.WithCancel(context.Background())

	cache := opts.CompilationCache
	if cache == nil {
		cache = SharedCompilationCache()
	}
	fail := func(err error) (*Host, error) {
		h.cancel()
		h.wg.Wait()
		return nil, err
	}
	rt, err := runtimeFor(cache)
	if err != nil {
		return fail(err)
	}
	h.rt = rt.rt
	cm, err := rt.compile(wasm)
	if err != nil {
		return fail(fmt.Errorf("%w: failed to load Wasm bytecode: %v", ErrRefused, err))
	}
	h.cm = cm
	if h.abi, err = checkModule(cm, h.table); err != nil {
		return fail(err)
	}
	if opts.CallTimeout > 0 {
		h.wg.Add(1)
		go h.watchdog()
	}

	// The canary proves that the module starts and accepts its configuration
	// before any worker exists, like Envoy does before accepting a config.
	canary, err := h.newVM(ctx, -1)
	if err != nil {
		return fail(err)
	}
	canary.close()

	h.vms = make([]*vm, opts.Workers)
	for i := range h.vms {
		v, err := h.newVM(ctx, i)
		if err != nil {
			for _, o := range h.vms[:i] {
				o.close()
			}
			return fail(err)
		}
		h.vms[i] = v
	}
	for _, v := range h.vms {
		v.startLoop()
	}
	return h, nil
}

// watchdog flags VM calls that exceed CallTimeout so the next host call traps.
func (h *Host) watchdog() {
	defer h.wg.Done()
	period := min(h.opts.CallTimeout/4, 250*time.Millisecond)
	t := time.NewTicker(max(period, 5*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-h.baseCtx.Done():
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		for _, v := range h.allVMs() {
			if start := v.callStart.Load(); start != 0 && now-start > int64(h.opts.CallTimeout) && !v.abort.Load() {
				v.abort.Store(true)
				h.log(v, 0, LogError, SourceHost, fmt.Sprintf("call into the VM exceeded CallTimeout %v; its next host call will trap", h.opts.CallTimeout))
			}
		}
	}
}

// allVMs snapshots the VMs the watchdog watches (the canary included).
func (h *Host) allVMs() []*vm {
	h.vmMu.Lock()
	defer h.vmMu.Unlock()
	return append([]*vm(nil), h.live...)
}

func (h *Host) log(v *vm, ctxID uint32, level LogLevel, source, msg string) {
	if level < h.opts.LogLevel {
		return
	}
	idx := 0
	if v != nil {
		idx = v.idx
	}
	h.logs.add(LogEntry{Time: time.Now(), Level: level, VM: idx, ContextID: ctxID, Source: source, Message: msg})
}

// Workers returns the number of worker VMs.
func (h *Host) Workers() int { return len(h.vms) }

// ABIVersion returns the proxy-wasm ABI version the module declares.
func (h *Host) ABIVersion() string { return string(h.abi) }

// Options returns the options the Host runs with (defaults applied).
func (h *Host) Options() Options { return h.opts }

// Logs returns a copy of the recorded log entries, oldest first.
func (h *Host) Logs() []LogEntry { return h.logs.snapshot() }

// ResetLogs forgets the recorded log entries.
func (h *Host) ResetLogs() { h.logs.reset() }

// SharedData returns the store the Host's VMs use.
func (h *Host) SharedData() *SharedData { return h.shared }

// GetSharedData reads a key of the Host's vm_id namespace.
func (h *Host) GetSharedData(key string) ([]byte, uint32, Status) {
	return h.shared.Get(h.opts.VMID, key)
}

// SetSharedData writes a key of the Host's vm_id namespace with Envoy's CAS rules.
func (h *Host) SetSharedData(key string, value []byte, cas uint32) Status {
	return h.shared.Set(h.opts.VMID, key, value, cas)
}

// Metric returns the value of the counter or gauge the guest defined under
// name (a histogram yields its sample count).
func (h *Host) Metric(name string) (value int64, ok bool) {
	return h.MetricStore().Metric(name)
}

// Histogram returns what the histogram metric name recorded.
func (h *Host) Histogram(name string) (HistogramSnapshot, bool) {
	return h.MetricStore().Histogram(name)
}

// Metrics lists every defined metric in definition order.
func (h *Host) Metrics() []MetricInfo { return h.metrics.list() }

// MetricStore returns the store the Host's metrics live in (Options.MetricStore, or the
// Host's own).
func (h *Host) MetricStore() *MetricStore { return &MetricStore{m: h.metrics} }

// Stats reports the health of the VMs.
type Stats struct {
	// Traps counts calls into any VM (canary included) that trapped.
	Traps int64
	// FailedVMs lists the worker VMs that are failed (they answer every
	// stream with 503 wasm_fail_stream, as FAIL_CLOSED does).
	FailedVMs []int
	// Ticks is the number of proxy_on_tick calls each worker VM received.
	Ticks []int64
	// GuestTime is the time spent inside calls into the worker VMs (guest
	// code plus the host functions it called), summed over workers.
	GuestTime time.Duration
	// HostCalls counts the guest's calls of each host function ("env.proxy_get_property",
	// "wasi_snapshot_preview1.clock_time_get"), over every VM (canary included);
	// functions never called are left out. AllocatorCalls counts the host's calls of the
	// guest's allocator (proxy_on_memory_allocate or malloc), which every host call that
	// returns data makes: benchmarks divide both by the requests served to tell what a
	// request costs in crossings of the VM boundary.
	HostCalls      map[string]int64
	AllocatorCalls int64
}

// Stats returns trap and failure counts.
func (h *Host) Stats() Stats {
	s := Stats{Traps: h.traps.Load(), AllocatorCalls: h.allocs.Load(), HostCalls: map[string]int64{}}
	for name, f := range h.table {
		if n := f.calls.Load(); n > 0 {
			s.HostCalls[name] = n
		}
	}
	for i, v := range h.vms {
		if v.failed.Load() {
			s.FailedVMs = append(s.FailedVMs, i)
		}
		s.Ticks = append(s.Ticks, v.ticks.Load())
		s.GuestTime += time.Duration(v.busy.Load())
	}
	return s
}

// GuestTime returns Stats().GuestTime without the rest of Stats, so that a benchmark can read
// it after every request without allocating.
func (h *Host) GuestTime() time.Duration {
	var t time.Duration
	for _, v := range h.vms {
		t += time.Duration(v.busy.Load())
	}
	return t
}

// VMFailed reports whether worker i has trapped and is now failed.
func (h *Host) VMFailed(i int) bool { return h.vms[i].failed.Load() }

// Close tears every VM down like Envoy at shutdown (open streams get
// on_log/on_done/on_delete, the root context on_done/on_delete), cancels
// outstanding callouts and waits for every goroutine, bounded by ctx.
func (h *Host) Close(ctx context.Context) error {
	h.closeMu.Do(func() {
		close(h.closed)
		h.cancel()
		var wgDone = make(chan struct{})
		for _, v := range h.vms {
			v.shutdown(ctx)
		}
		go func() { h.wg.Wait(); close(wgDone) }()
		select {
		case <-wgDone:
		case <-ctx.Done():
			// A VM stuck in guest code without host calls cannot be stopped;
			// leave the runtime open rather than freeing memory under it.
			for _, v := range h.vms {
				v.abort.Store(true)
			}
			h.closeErr = fmt.Errorf("wasmhost: close: %w (a VM is still running guest code)", ctx.Err())
			return
		}
		// Idle keep-alive connections of callouts and forwarded requests
		// each hold goroutines; release them with the host.
		h.transport.CloseIdleConnections()
		// The runtime is shared; the VMs' module instances (and their
		// memories) are this host's to free.
		for _, v := range h.allVMs() {
			v.close()
		}
	})
	return h.closeErr
}
