package wasmhost

import (
	"context"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// The shipped filter module (build/ratelimit.wasm, built from the repository root) imports
// nothing Envoy lacks, with Envoy's signatures, and exports what Envoy looks for. Loading it
// into the host checks the same, but this test names every import and export, so a new host
// call in the filter shows up here with its name.
func TestFilterModuleImportsAndExports(t *testing.T) {
	wasm := wasmtest.BuildModule(t)
	ctx := context.Background()
	// The shared compilation cache holds the module compiled by the other tests (or by an
	// earlier run), so this runtime only decodes and validates it.
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(SharedCompilationCache()))
	defer r.Close(ctx)
	cm, err := r.CompileModule(ctx, wasm)
	require.NoError(t, err)

	offered := buildHostTable()
	for _, imp := range cm.ImportedFunctions() {
		mod, name, _ := imp.Import()
		f, ok := offered[mod+"."+name]
		require.Truef(t, ok, "import %s.%s is not registered by Envoy", mod, name)
		require.Equalf(t, f.params, imp.ParamTypes(), "import %s.%s parameters", mod, name)
		require.Equalf(t, f.results, imp.ResultTypes(), "import %s.%s results", mod, name)
		require.NotContainsf(t, []string{"proxy_get_configuration", "proxy_continue_request",
			"proxy_continue_response", "proxy_clear_route_cache"}, name, "0.1.0-only import %s", name)
	}
	exports := cm.ExportedFunctions()
	for _, name := range []string{
		"_initialize", "proxy_abi_version_0_2_1", "proxy_on_memory_allocate",
		"proxy_on_context_create", "proxy_on_vm_start", "proxy_on_configure", "proxy_on_tick",
		"proxy_on_request_headers", "proxy_on_request_body", "proxy_on_response_headers",
		"proxy_on_http_call_response", "proxy_on_log", "proxy_on_done", "proxy_on_delete",
	} {
		require.Containsf(t, exports, name, "export %s", name)
	}
	t.Logf("module: %d bytes, %d imports, %d exports", len(wasm), len(cm.ImportedFunctions()), len(exports))
}
