package wasmhost

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newErr starts a Host only to see whether New accepts the module and configuration, and
// closes it again when it does.
func newErr(t *testing.T, wasm []byte, opts Options) error {
	t.Helper()
	h, err := startHost(wasm, opts)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, h.Close(ctx))
	}
	return err
}

func TestMinimalModuleLoads(t *testing.T) {
	require.NoError(t, newErr(t, buildWasm(nil, minimalFuncs()), Options{Workers: 2}))
}

func TestLoadRefusals(t *testing.T) {
	logImport := wImport{"env", "proxy_log", p3, pI32}
	cases := []struct {
		name    string
		imports []wImport
		funcs   []wFunc
		want    string
	}{
		{"no ABI version export", nil, withoutFunc(minimalFuncs(), "proxy_abi_version_0_2_1"), "missing or unknown Proxy-Wasm ABI version"},
		{"ABI 0.1.0", nil, withFunc(withoutFunc(minimalFuncs(), "proxy_abi_version_0_2_1"), wFunc{export: "proxy_abi_version_0_1_0"}), "ABI 0.1.0"},
		{"no allocator", nil, withoutFunc(minimalFuncs(), "proxy_on_memory_allocate"), "missing malloc"},
		{"unknown env import", []wImport{{"env", "proxy_frobnicate", pI32, pI32}}, minimalFuncs(), "unknown import env.proxy_frobnicate"},
		{"0.1.0-only import", []wImport{{"env", "proxy_get_configuration", p2, pI32}}, minimalFuncs(), "only in proxy-wasm ABI 0.1.0"},
		{"0.1.0-only continue_request", []wImport{{"env", "proxy_continue_request", p0, pI32}}, minimalFuncs(), "only in proxy-wasm ABI 0.1.0"},
		{"WASI function Envoy lacks", []wImport{{"wasi_snapshot_preview1", "path_readlink", []byte{tI32, tI32, tI32, tI32, tI32, tI32}, pI32}}, minimalFuncs(), "unknown import wasi_snapshot_preview1.path_readlink"},
		{"unknown module", []wImport{{"wasi:io/streams", "read", pI32, pI32}}, minimalFuncs(), "unknown import"},
		{"import with wrong signature", []wImport{{"env", "proxy_log", p2, pI32}}, minimalFuncs(), "import env.proxy_log has signature (i32,i32)->(i32)"},
		{"export with wrong signature", []wImport{logImport}, withFunc(minimalFuncs(), wFunc{export: "proxy_on_request_headers", params: p2, results: pI32, code: iConst(0)}), "bad function signature for export proxy_on_request_headers"},
		{"get_log_level needs 0.2.1", []wImport{{"env", "proxy_get_log_level", pI32, pI32}}, withFunc(withoutFunc(minimalFuncs(), "proxy_abi_version_0_2_1"), wFunc{export: "proxy_abi_version_0_2_0"}), "only registered for ABI 0.2.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := newErr(t, buildWasm(c.imports, c.funcs), Options{})
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrRefused), "%v", err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestMallocIsPreferredOverProxyOnMemoryAllocate(t *testing.T) {
	// A module exporting both: Envoy uses malloc. Here malloc traps, so a
	// host allocation (reading the VM configuration) must fail the start.
	fs := withFunc(minimalFuncs(), wFunc{export: "malloc", params: pI32, results: pI32, code: iUnreachable})
	imports := []wImport{{"env", "proxy_get_buffer_bytes", p5, pI32}}
	fs = withFunc(fs, wFunc{export: "proxy_on_vm_start", params: p2, results: pI32,
		code: cat(iConst(BufferVMConfiguration), iConst(0), iConst(100), iConst(0), iConst(4), call(0), iDrop, iConst(1))})
	err := newErr(t, buildWasm(imports, fs), Options{VMConfig: []byte("vm config")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "proxy_on_vm_start trapped")
	assert.Contains(t, err.Error(), "allocator trapped")
}

func TestRestrictedCallDuringInitializeTraps(t *testing.T) {
	imports := []wImport{
		{"env", "proxy_log", p3, pI32},
		{"env", "proxy_get_shared_data", p5, pI32},
	}
	// proxy_log is allowed during _initialize ...
	ok := withFunc(minimalFuncs(), wFunc{export: "_initialize", code: cat(iConst(2), iConst(0), iConst(0), call(0), iDrop)})
	require.NoError(t, newErr(t, buildWasm(imports, ok), Options{}))
	// ... proxy_get_shared_data is not.
	bad := withFunc(minimalFuncs(), wFunc{export: "_initialize", code: cat(iConst(0), iConst(0), iConst(0), iConst(0), iConst(0), call(1), iDrop)})
	err := newErr(t, buildWasm(imports, bad), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "_initialize trapped")
	assert.Contains(t, err.Error(), "env.proxy_get_shared_data is not allowed during _initialize")
}

func TestRestrictedCallDuringAllocatorTraps(t *testing.T) {
	imports := []wImport{
		{"env", "proxy_get_buffer_bytes", p5, pI32},
		{"env", "proxy_set_tick_period_milliseconds", pI32, pI32},
		{"wasi_snapshot_preview1", "clock_time_get", []byte{tI32, tI64, tI32}, pI32},
	}
	readVMConfig := cat(iConst(BufferVMConfiguration), iConst(0), iConst(100), iConst(0), iConst(4), call(0), iDrop, iConst(1))
	base := withFunc(minimalFuncs(), wFunc{export: "proxy_on_vm_start", params: p2, results: pI32, code: readVMConfig})
	// clock_time_get is allowed inside the allocator ...
	okAlloc := withFunc(base, wFunc{export: "proxy_on_memory_allocate", params: pI32, results: pI32,
		code: cat(iConst(0), iConst64(0), iConst(64), call(2), iDrop, iConst(4096))})
	require.NoError(t, newErr(t, buildWasm(imports, okAlloc), Options{VMConfig: []byte("x")}))
	// ... a tick-period call is not.
	badAlloc := withFunc(base, wFunc{export: "proxy_on_memory_allocate", params: pI32, results: pI32,
		code: cat(iConst(10), call(1), iDrop, iConst(4096))})
	err := newErr(t, buildWasm(imports, badAlloc), Options{VMConfig: []byte("x")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "env.proxy_set_tick_period_milliseconds is not allowed during the allocator")
}

func TestConfigureFalseRefusesWithGuestLog(t *testing.T) {
	err := newErr(t, abiGuest(t), Options{PluginConfig: []byte("reject=rate must be positive")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "proxy_on_configure returned false")
	assert.Contains(t, err.Error(), "invalid plugin config: rate must be positive")
	assert.Contains(t, err.Error(), "canary", "the canary VM finds the problem first")
	err = newErr(t, abiGuest(t), Options{VMConfig: []byte("reject-vm")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "proxy_on_vm_start returned false")
}

func TestTrapFailsStreamAndVM(t *testing.T) {
	fs := withFunc(minimalFuncs(), wFunc{export: "proxy_on_request_headers", params: p3, results: pI32, code: iUnreachable})
	h := newTestHost(t, buildWasm(nil, fs), Options{Workers: 2})
	res := do(t, h, Request{Worker: 0})
	require.NotNil(t, res.Local)
	assert.Equal(t, 503, res.Status)
	assert.Equal(t, "wasm_fail_stream", res.Local.Details)
	assert.True(t, res.Failed)
	assert.True(t, h.VMFailed(0))
	assert.False(t, h.VMFailed(1))
	assert.Equal(t, []int{0}, h.Stats().FailedVMs)
	assert.EqualValues(t, 1, h.Stats().Traps)
	assert.NotEmpty(t, logsContaining(h, "wasm trap in proxy_on_request_headers"))
	// Further streams on the failed VM get 503 without calling into it.
	res = do(t, h, Request{Worker: 0})
	assert.Equal(t, 503, res.Status)
	assert.Equal(t, "wasm_fail_stream", res.Local.Details)
	assert.EqualValues(t, 1, h.Stats().Traps)
}

func TestGoPanicTrapFailsStream(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{Workers: 1})
	res := do(t, h, Request{Worker: 0, Headers: [][2]string{{"x-op", "panic"}}})
	assert.Equal(t, 503, res.Status)
	assert.True(t, res.Failed)
	assert.True(t, h.VMFailed(0))
	// The Go runtime prints the panic on stderr before trapping.
	var stderr []LogEntry
	for _, e := range h.Logs() {
		if e.Source == SourceStderr {
			stderr = append(stderr, e)
		}
	}
	assert.NotEmpty(t, stderr)
	res = do(t, h, Request{Worker: 0})
	assert.Equal(t, 503, res.Status)
}

func TestRecoveredPanicDoesNotFailVM(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{Workers: 1})
	res := do(t, h, Request{Worker: 0, Headers: [][2]string{{"x-op", "recover-panic"}}})
	assert.True(t, res.Continued)
	assert.Equal(t, "1", res.RequestHeader("x-recovered"))
	assert.False(t, h.VMFailed(0))
	assert.Zero(t, h.Stats().Traps)
}
