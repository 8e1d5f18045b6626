// Package filter is the rate-limiting HTTP filter: the proxy-wasm VM, plugin and HTTP
// contexts that turn the configured rules into allow or deny decisions for each request.
//
// A request flows like this: the rules that apply are matched (filter/config), each builds its
// key, each local rule decides against its slot in Envoy shared data (sharedstate, algorithms)
// without writing anything, and only when no enforced rule denies are the new states written
// with compare-and-swap. A denied request gets a local response (429 by default); an allowed
// one gets the rate-limit headers on its response (see respond.go). A request that repeats a
// matched rule's key header is refused with 400 before anything is decided (see request.go).
//
// The files: http.go (the stream's callbacks), plugin.go (the plugin's callbacks, configure,
// the metric definitions), request.go (reading the request, matching the rules, building their
// keys), global.go (the Redis call), decide.go (the local decisions and their writes),
// respond.go (denials, the rate-limit headers), tick.go (the shaping queue, adaptive limits),
// lease.go (leases, the over-limit cache), usage.go (usage costs), breaker.go, decisions.go (a
// request's working set) and filter.go (the VM context).
//
// Cold code is kept out of line. Envoy runs the module on V8 without its baseline compiler
// (--no-liftoff), so V8 compiles each Wasm function with TurboFan on its first call, at about
// 1.1 ms of CPU per KB of function body on Node 20 (docs/BENCHMARKS.md, "V8 (Node)": a first
// request that compiled 64,353 bytes took 71.4-74.8 ms, nearly all of it compiling). Code that
// runs only on errors, on invalid configurations or for options a plain request does not use
// is therefore moved into functions of its own (marked //go:noinline where the compiler would
// inline it back), here and in the packages below, so that a valid configuration and its first
// request compile less. A comment that says a function is kept out of line points here;
// wasmhost/v8's TestV8ValidConfigureCompilesNoColdCode and TestV8FirstRequestCompileBudget
// check it.
package filter
