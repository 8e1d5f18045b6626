// Package filter is the rate-limiting HTTP filter: the proxy-wasm VM, plugin and HTTP
// contexts that turn the configured rules into allow or deny decisions for each request.
//
// A request flows like this: the rules that apply are matched (filter/config), each builds its
// key, each local rule decides against its slot in Envoy shared data (sharedstate, algorithms)
// without writing anything, and only when no enforced rule denies are the new states written
// with compare-and-swap. A denied request gets a local response (429 by default); an allowed
// one gets the rate-limit headers on its response (see respond.go). A request that repeats a
// matched rule's key header is refused with 400 before anything is decided (see match.go).
//
// The files, each one path of a request, from the callbacks down; no file calls a function of
// a file that calls one of its own, directly or through others (TestFileCallsAreAcyclic):
//   - http.go: the stream's callbacks (request headers, response headers, end of stream).
//   - plugin.go: the plugin's callbacks, configure, each rule's state and metric definitions.
//   - match.go: matching the rules, building their keys, phase 1 and its refusals (400, 431).
//   - global.go: the Redis call that decides the global rules, its answers, the partition secret.
//   - decide.go: the local decisions and the writes of phase 2 (finish).
//   - usage.go: usage costs: a stream's reservations, their settlement when it ends.
//   - usagescan.go: the scanner of a response body's usage values (JSON, SSE).
//   - respond.go: denials and the rate-limit response headers.
//   - filterstate.go: the filter_state properties of a decided request.
//   - decisions.go: a request's working set, the rules applied to it.
//   - lease.go: leases and the over-limit cache.
//   - enforce.go: enforce_percent, the share of requests a rule enforces.
//   - request.go: the request's attributes and headers, each read from the host once.
//   - redisclient.go: the Redis client: its metrics, breakers, and reading a callout's answer.
//   - breaker.go: the breaker that keeps a dead Redis from costing every request a timeout.
//   - tick.go: the VM's tick: the shaping queue, adaptive limits.
//   - near.go: the near-limit counter.
//   - metrics.go: the rules' metric names and the helpers that define and update them.
//   - filter.go: the VM context, recovering panics, logging store failures.
//   - doc.go: this overview.
//
// Cold code is kept out of line. Envoy runs the module on V8 without its baseline compiler
// (--no-liftoff), so V8 compiles each Wasm function with TurboFan on its first call, at about
// 1.1 ms of CPU per KB of function body on Node 20 (docs/BENCHMARKS.md, "V8 (Node)": a first
// request that compiled 64,353 bytes took 71.4-74.8 ms, nearly all of it compiling). Code that
// runs only on errors, on invalid configurations or for options a plain request does not use
// is therefore moved into functions of its own, here and in the packages below, so that a
// valid configuration and its first request compile less. A comment that says a function is
// kept out of line points here; wasmhost/v8's TestV8ValidConfigureCompilesNoColdCode and
// TestV8FirstRequestCompileBudget check it. //go:noinline is kept only where the compiler
// would otherwise inline a function into hot code and removing the directive alone adds at
// least 0.5% to what V8 compiles at configure or on a VM's first request;
// scripts/noinline-cost.sh measures each directive that way.
package filter
