// Package abi binds the proxy-wasm ABI 0.2.1 for standard Go.
//
// The only served release of the proxy-wasm Go SDK targets TinyGo: its //export callbacks are
// ignored by the standard Go compiler and its host calls are compiled only under TinyGo. This
// package fills that gap. Under GOOS=wasip1 it declares every guest callback Envoy calls for
// HTTP filters with //go:wasmexport and every host call the filter needs with //go:wasmimport,
// and dispatches the callbacks to the SDK's types.VMContext, types.PluginContext and
// types.HttpContext interfaces. In a native build the same functions delegate to the SDK's
// proxywasm package, so the SDK's proxytest emulator can drive the very same filter code in a
// plain `go test`.
//
// The function names and signatures mirror the SDK's proxywasm package on purpose: filter code
// reads the same in both builds, and the native build is a thin delegation.
package abi
