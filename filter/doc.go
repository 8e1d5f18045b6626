// Package filter is the rate-limiting HTTP filter: the proxy-wasm VM, plugin and HTTP
// contexts that turn the configured rules into allow or deny decisions for each request.
//
// A request flows like this: the rules that apply are matched (filter/config), each builds its
// key, each local rule decides against its slot in Envoy shared data (sharedstate, algorithms)
// without writing anything, and only when no enforced rule denies are the new states written
// with compare-and-swap. A denied request gets a local response (429 by default) with the
// configured headers; an allowed one gets the rate-limit headers on its response
// (draft-ietf-httpapi-ratelimit-headers-11, see respond.go). A request that carries a key
// header of a matched rule more than once is refused with 400 before anything is decided
// (see request.go).
//
// The files follow that path, each calling only into the ones after it: http.go (the stream's
// callbacks), plugin.go (the plugin's callbacks, configure, the metric definitions, the
// contexts), request.go (reading the request, matching the rules, building their keys),
// global.go (the Redis call: building it, sending it, its answer), decide.go (the local
// decisions and their writes), respond.go (denials, local responses, the rate-limit headers),
// tick.go (the shaping queue, adaptive limits), lease.go (leases, the over-limit cache),
// breaker.go, decisions.go (a request's working set) and filter.go (the VM context).
//
// Cold code is kept out of line. Envoy runs the module on V8 without its baseline compiler
// (--no-liftoff), so V8 compiles each Wasm function with TurboFan on its first call, at about
// 0.7 ms per KB of function body on Node 20 (docs/BENCHMARKS.md): a fresh VM's first request
// spends most of its time compiling the code it runs. Code that runs only on errors, on invalid
// configurations or for options and paths a plain request does not take is therefore moved into
// functions of its own (marked //go:noinline where the Go compiler would otherwise inline it
// back), in this package and in those below it, so that a valid configuration and its first
// request compile less. A comment that says a function is kept out of line points here;
// wasmhost/v8's TestV8ValidConfigureCompilesNoColdCode and TestV8FirstRequestCompileBudget
// check that the cold code stays uncompiled.
package filter
