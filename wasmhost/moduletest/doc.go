// Package moduletest drives the compiled filter (build/ratelimit.wasm, rebuilt by the tests
// when stale) in the project's wazero host, which behaves like Envoy: several worker VMs, one
// shared data, callouts over real HTTP to webdis and redis-server. Its tests are the halves of
// the filter's tests that only make sense against the module, plus the shared scenario and
// table definitions of package filtertest, which package filter runs natively. The package has
// no non-test code besides this comment.
package moduletest
