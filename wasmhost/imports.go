package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// restriction is the set of host calls a VM may make at a given moment.
type restriction uint8

const (
	restrictNone  restriction = iota
	restrictStart             // during _initialize / main / _start
	restrictAlloc             // during the allocator (malloc / proxy_on_memory_allocate)
)

func (r restriction) String() string {
	switch r {
	case restrictStart:
		return "_initialize"
	case restrictAlloc:
		return "the allocator"
	}
	return "a callback"
}

// hostFunc describes one function the host offers to the guest.
type hostFunc struct {
	module  string
	name    string
	params  []api.ValueType
	results []api.ValueType
	fn      func(v *vm, stack []uint64)
	// allowStart and allowAlloc say whether the call is permitted while the
	// VM runs its start function or its allocator (cpp-host's restricted
	// callback lists); any other call then traps.
	allowStart bool
	allowAlloc bool
	// allowAlloc139 permits the call during the allocator from Envoy 1.39 on
	// (Options.PollOneoff): proxy-wasm-cpp-host #533 widened the allocator's
	// list with poll_oneoff, which the Go runtime calls when a collection that
	// starts inside the allocator sleeps.
	allowAlloc139 bool
	// abi021Only marks functions Envoy only registers for ABI 0.2.1.
	abi021Only bool
	// calls counts the guest's calls of the function, over every VM of the Host (see
	// Stats.HostCalls); set by buildHostTable.
	calls *atomic.Int64
}

func (f *hostFunc) String() string { return f.module + "." + f.name }

func sig(params ...api.ValueType) []api.ValueType { return params }

var (
	r1   = sig(i32)
	none = sig()
)

// abiOnlyV010 are the host functions Envoy registers only for ABI 0.1.0
// modules; a 0.2.x module importing them fails to link.
var abiOnlyV010 = []string{"proxy_get_configuration", "proxy_continue_request", "proxy_continue_response", "proxy_clear_route_cache"}

// envFuncs is the "env" module: every proxy_* function Envoy registers for ABI
// 0.2.x (FOR_ALL_HOST_FUNCTIONS plus the 0.2.x ABI-specific ones) and the two
// emscripten helpers cpp-host always registers.
func envFuncs() []*hostFunc {
	n := func(k int) []api.ValueType {
		p := make([]api.ValueType, k)
		for i := range p {
			p[i] = i32
		}
		return p
	}
	return []*hostFunc{
		{name: "proxy_log", params: n(3), results: r1, fn: hProxyLog, allowStart: true, allowAlloc: true},
		{name: "proxy_get_log_level", params: n(1), results: r1, fn: hGetLogLevel, abi021Only: true},
		{name: "proxy_get_status", params: n(3), results: r1, fn: hGetStatus},
		{name: "proxy_set_property", params: n(4), results: r1, fn: hSetProperty},
		{name: "proxy_get_property", params: n(4), results: r1, fn: hGetProperty},
		{name: "proxy_send_local_response", params: n(8), results: r1, fn: hSendLocalResponse},
		{name: "proxy_get_shared_data", params: n(5), results: r1, fn: hGetSharedData},
		{name: "proxy_set_shared_data", params: n(5), results: r1, fn: hSetSharedData},
		{name: "proxy_register_shared_queue", params: n(3), results: r1, fn: hRegisterSharedQueue},
		{name: "proxy_resolve_shared_queue", params: n(5), results: r1, fn: hResolveSharedQueue},
		{name: "proxy_dequeue_shared_queue", params: n(3), results: r1, fn: hDequeueSharedQueue},
		{name: "proxy_enqueue_shared_queue", params: n(3), results: r1, fn: hEnqueueSharedQueue},
		{name: "proxy_get_header_map_value", params: n(5), results: r1, fn: hGetHeaderMapValue},
		{name: "proxy_add_header_map_value", params: n(5), results: r1, fn: hAddHeaderMapValue},
		{name: "proxy_replace_header_map_value", params: n(5), results: r1, fn: hReplaceHeaderMapValue},
		{name: "proxy_remove_header_map_value", params: n(3), results: r1, fn: hRemoveHeaderMapValue},
		{name: "proxy_get_header_map_pairs", params: n(3), results: r1, fn: hGetHeaderMapPairs},
		{name: "proxy_set_header_map_pairs", params: n(3), results: r1, fn: hSetHeaderMapPairs},
		{name: "proxy_get_header_map_size", params: n(2), results: r1, fn: hGetHeaderMapSize},
		{name: "proxy_get_buffer_status", params: n(3), results: r1, fn: hGetBufferStatus},
		{name: "proxy_get_buffer_bytes", params: n(5), results: r1, fn: hGetBufferBytes},
		{name: "proxy_set_buffer_bytes", params: n(5), results: r1, fn: hSetBufferBytes},
		{name: "proxy_http_call", params: n(10), results: r1, fn: hHTTPCall},
		{name: "proxy_grpc_call", params: n(12), results: r1, fn: hUnimplemented},
		{name: "proxy_grpc_stream", params: n(9), results: r1, fn: hUnimplemented},
		{name: "proxy_grpc_close", params: n(1), results: r1, fn: hUnimplemented},
		{name: "proxy_grpc_cancel", params: n(1), results: r1, fn: hUnimplemented},
		{name: "proxy_grpc_send", params: n(4), results: r1, fn: hUnimplemented},
		{name: "proxy_set_tick_period_milliseconds", params: n(1), results: r1, fn: hSetTickPeriod},
		{name: "proxy_get_current_time_nanoseconds", params: n(1), results: r1, fn: hGetCurrentTime},
		{name: "proxy_define_metric", params: n(4), results: r1, fn: hDefineMetric},
		{name: "proxy_increment_metric", params: sig(i32, i64), results: r1, fn: hIncrementMetric},
		{name: "proxy_record_metric", params: sig(i32, i64), results: r1, fn: hRecordMetric},
		{name: "proxy_get_metric", params: n(2), results: r1, fn: hGetMetric},
		{name: "proxy_set_effective_context", params: n(1), results: r1, fn: hSetEffectiveContext},
		{name: "proxy_done", params: n(0), results: r1, fn: hDone},
		{name: "proxy_call_foreign_function", params: n(6), results: r1, fn: hCallForeignFunction},
		{name: "proxy_continue_stream", params: n(1), results: r1, fn: hContinueStream},
		{name: "proxy_close_stream", params: n(1), results: r1, fn: hCloseStream},
		{name: "pthread_equal", params: n(2), results: r1, fn: hPthreadEqual},
		{name: "emscripten_notify_memory_growth", params: n(1), results: none, fn: hNotifyMemoryGrowth},
	}
}

// wasiFuncs is the WASI subset Envoy registers, under both
// "wasi_snapshot_preview1" and "wasi_unstable" (cpp-host registers both).
func wasiFuncs() []*hostFunc {
	return []*hostFunc{
		{name: "fd_write", params: sig(i32, i32, i32, i32), results: r1, fn: wFdWrite, allowStart: true, allowAlloc: true},
		{name: "fd_read", params: sig(i32, i32, i32, i32), results: r1, fn: wFdRead},
		{name: "fd_seek", params: sig(i32, i64, i32, i32), results: r1, fn: wFdSeek},
		{name: "fd_close", params: sig(i32), results: r1, fn: wFdClose},
		{name: "fd_fdstat_get", params: sig(i32, i32), results: r1, fn: wFdFdstatGet, allowStart: true},
		{name: "fd_fdstat_set_flags", params: sig(i32, i32), results: r1, fn: wFdFdstatSetFlags, allowStart: true},
		{name: "fd_filestat_get", params: sig(i32, i32), results: r1, fn: wFdFilestatGet},
		{name: "environ_get", params: sig(i32, i32), results: r1, fn: wEnvironGet, allowStart: true},
		{name: "environ_sizes_get", params: sig(i32, i32), results: r1, fn: wEnvironSizesGet, allowStart: true},
		{name: "args_get", params: sig(i32, i32), results: r1, fn: wArgsGet, allowStart: true},
		{name: "args_sizes_get", params: sig(i32, i32), results: r1, fn: wArgsSizesGet, allowStart: true},
		{name: "clock_time_get", params: sig(i32, i64, i32), results: r1, fn: wClockTimeGet, allowStart: true, allowAlloc: true},
		{name: "clock_res_get", params: sig(i32, i32), results: r1, fn: wClockResGet},
		{name: "random_get", params: sig(i32, i32), results: r1, fn: wRandomGet, allowStart: true},
		{name: "sched_yield", params: sig(), results: r1, fn: wSchedYield},
		{name: "poll_oneoff", params: sig(i32, i32, i32, i32), results: r1, fn: wPollOneoff, allowStart: true, allowAlloc139: true},
		{name: "proc_exit", params: sig(i32), results: none, fn: wProcExit},
		{name: "path_open", params: sig(i32, i32, i32, i32, i32, i64, i64, i32, i32), results: r1, fn: wPathOpen},
		{name: "fd_prestat_get", params: sig(i32, i32), results: r1, fn: wFdPrestatGet, allowStart: true},
		{name: "fd_prestat_dir_name", params: sig(i32, i32, i32), results: r1, fn: wFdPrestatDirName, allowStart: true},
	}
}

// hostTable holds every host function by "module.name".
type hostTable map[string]*hostFunc

func buildHostTable() hostTable {
	t := hostTable{}
	for _, f := range envFuncs() {
		f.module = "env"
		f.calls = new(atomic.Int64)
		t[f.String()] = f
	}
	for _, mod := range []string{"wasi_snapshot_preview1", "wasi_unstable"} {
		for _, f := range wasiFuncs() {
			g := *f
			g.module = mod
			g.calls = new(atomic.Int64)
			t[g.String()] = &g
		}
	}
	return t
}

// hostFuncNames names every host function ("module.name"), sorted: the order
// of each Host's funcs.
var hostFuncNames = func() []string {
	names := make([]string, 0, 64)
	for name := range buildHostTable() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}()

// instantiateHostModules registers the host modules in a runtime shared by
// Hosts: the function at hostFuncNames[i] calls the funcs[i] of the Host of the
// calling VM. Every function is a stack-based api.GoModuleFunc:
// reflection-based host functions cost about twice as much per call.
func instantiateHostModules(ctx context.Context, rt wazero.Runtime) error {
	table := buildHostTable()
	byModule := map[string]wazero.HostModuleBuilder{}
	var mods []string
	for i, name := range hostFuncNames {
		f := table[name]
		b, ok := byModule[f.module]
		if !ok {
			b = rt.NewHostModuleBuilder(f.module)
			byModule[f.module] = b
			mods = append(mods, f.module)
		}
		b.NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
				v := vmFromContext(ctx)
				f := v.h.funcs[i]
				v.enter(f)
				f.fn(v, stack)
			}), f.params, f.results).
			Export(f.name)
	}
	for _, m := range mods {
		if _, err := byModule[m].Instantiate(ctx); err != nil {
			return fmt.Errorf("wasmhost: instantiating host module %s: %w", m, err)
		}
	}
	return nil
}

// abiVersion is the proxy-wasm ABI a module declares.
type abiVersion string

const (
	abi010 abiVersion = "0.1.0"
	abi020 abiVersion = "0.2.0"
	abi021 abiVersion = "0.2.1"
)

// exportSigs are the signatures Envoy checks for the exports it looks up; a
// present export with another signature fails the load.
var exportSigs = map[string][2][]api.ValueType{
	"_initialize":                             {none, none},
	"_start":                                  {none, none},
	"main":                                    {sig(i32, i32), r1},
	"malloc":                                  {r1, r1},
	"proxy_on_memory_allocate":                {r1, r1},
	"proxy_abi_version_0_1_0":                 {none, none},
	"proxy_abi_version_0_2_0":                 {none, none},
	"proxy_abi_version_0_2_1":                 {none, none},
	"proxy_on_context_create":                 {sig(i32, i32), none},
	"proxy_on_vm_start":                       {sig(i32, i32), r1},
	"proxy_validate_configuration":            {sig(i32, i32), r1},
	"proxy_on_configure":                      {sig(i32, i32), r1},
	"proxy_on_tick":                           {r1, none},
	"proxy_on_done":                           {r1, r1},
	"proxy_on_log":                            {r1, none},
	"proxy_on_delete":                         {r1, none},
	"proxy_on_request_headers":                {sig(i32, i32, i32), r1},
	"proxy_on_request_body":                   {sig(i32, i32, i32), r1},
	"proxy_on_request_trailers":               {sig(i32, i32), r1},
	"proxy_on_request_metadata":               {sig(i32, i32), r1},
	"proxy_on_response_headers":               {sig(i32, i32, i32), r1},
	"proxy_on_response_body":                  {sig(i32, i32, i32), r1},
	"proxy_on_response_trailers":              {sig(i32, i32), r1},
	"proxy_on_response_metadata":              {sig(i32, i32), r1},
	"proxy_on_http_call_response":             {sig(i32, i32, i32, i32, i32), none},
	"proxy_on_queue_ready":                    {sig(i32, i32), none},
	"proxy_on_new_connection":                 {r1, r1},
	"proxy_on_downstream_data":                {sig(i32, i32, i32), r1},
	"proxy_on_upstream_data":                  {sig(i32, i32, i32), r1},
	"proxy_on_downstream_connection_close":    {sig(i32, i32), none},
	"proxy_on_upstream_connection_close":      {sig(i32, i32), none},
	"proxy_on_grpc_receive_initial_metadata":  {sig(i32, i32, i32), none},
	"proxy_on_grpc_receive":                   {sig(i32, i32, i32), none},
	"proxy_on_grpc_receive_trailing_metadata": {sig(i32, i32, i32), none},
	"proxy_on_grpc_close":                     {sig(i32, i32, i32), none},
	"proxy_on_foreign_function":               {sig(i32, i32, i32), none},
}

// ErrRefused wraps every reason a module is refused at load time.
var ErrRefused = errors.New("wasmhost: module refused")

// checkModule applies Envoy's load-time checks to a compiled module: an ABI
// version export, an allocator, known exports with the right signatures, and
// only imports Envoy registers for that ABI version with the right signatures.
func checkModule(cm wazero.CompiledModule, table hostTable) (abiVersion, error) {
	exports := cm.ExportedFunctions()
	var abi abiVersion
	for _, v := range []abiVersion{abi021, abi020, abi010} {
		if _, ok := exports["proxy_abi_version_"+strings.ReplaceAll(string(v), ".", "_")]; ok {
			abi = v
			break
		}
	}
	if abi == "" {
		return "", fmt.Errorf("%w: missing or unknown Proxy-Wasm ABI version (no proxy_abi_version_0_2_1, _0_2_0 or _0_1_0 export)", ErrRefused)
	}
	if abi == abi010 {
		return "", fmt.Errorf("%w: ABI 0.1.0 modules are not supported by this host (Envoy would still load them)", ErrRefused)
	}
	for name, def := range exports {
		want, ok := exportSigs[name]
		if !ok {
			continue
		}
		if !slices.Equal(def.ParamTypes(), want[0]) || !slices.Equal(def.ResultTypes(), want[1]) {
			return "", fmt.Errorf("%w: bad function signature for export %s: %s, want %s", ErrRefused, name, sigString(def.ParamTypes(), def.ResultTypes()), sigString(want[0], want[1]))
		}
	}
	if _, ok := exports["malloc"]; !ok {
		if _, ok := exports["proxy_on_memory_allocate"]; !ok {
			return "", fmt.Errorf("%w: Wasm module is missing malloc function (neither malloc nor proxy_on_memory_allocate is exported)", ErrRefused)
		}
	}
	if len(cm.ExportedMemories()) == 0 && len(cm.ImportedMemories()) == 0 {
		return "", fmt.Errorf("%w: module has no memory", ErrRefused)
	}
	if len(cm.ImportedMemories()) > 0 {
		return "", fmt.Errorf("%w: module imports a memory; Envoy provides none", ErrRefused)
	}
	for _, def := range cm.ImportedFunctions() {
		mod, name, _ := def.Import()
		full := mod + "." + name
		if mod == "env" && slices.Contains(abiOnlyV010, name) {
			return "", fmt.Errorf("%w: import %s exists only in proxy-wasm ABI 0.1.0; Envoy does not register it for ABI %s", ErrRefused, full, abi)
		}
		f, ok := table[full]
		if !ok {
			return "", fmt.Errorf("%w: unknown import %s (Envoy does not provide it)", ErrRefused, full)
		}
		if f.abi021Only && abi != abi021 {
			return "", fmt.Errorf("%w: import %s is only registered for ABI 0.2.1, module declares %s", ErrRefused, full, abi)
		}
		if !slices.Equal(def.ParamTypes(), f.params) || !slices.Equal(def.ResultTypes(), f.results) {
			return "", fmt.Errorf("%w: import %s has signature %s, Envoy's is %s", ErrRefused, full, sigString(def.ParamTypes(), def.ResultTypes()), sigString(f.params, f.results))
		}
	}
	return abi, nil
}

func sigString(params, results []api.ValueType) string {
	name := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ",")
	}
	return "(" + name(params) + ")->(" + name(results) + ")"
}
