package filter

import (
	"strconv"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Option changes how the filter runs; the product uses none, tests use them (export_test.go).
type Option func(*options)

type options struct {
	now   func() int64
	store sharedstate.Store
}

// NewVMContext returns the VM context to register with abi.SetVMContext.
func NewVMContext(opts ...Option) types.VMContext {
	o := options{now: abi.WallClockNanos, store: sharedstate.Host{}}
	for _, f := range opts {
		f(&o)
	}
	return &vmContext{opts: o}
}

type vmContext struct {
	types.DefaultVMContext
	opts options
}

func (v *vmContext) NewPluginContext(uint32) types.PluginContext {
	return &plugin{now: v.opts.now, store: v.opts.store}
}

// recoverTo is deferred by every callback of the filter: a panic must never reach the ABI
// layer unannounced, and the request it happened on follows the configured failure mode.
func recoverTo(where string, onPanic func()) {
	if r := recover(); r != nil {
		what := "a value that is neither an error nor a string"
		switch v := r.(type) {
		case error:
			what = v.Error()
		case string:
			what = v
		}
		abi.LogError("ratelimit: recovered panic in " + where + ": " + what)
		if onPanic != nil {
			onPanic()
		}
	}
}

// storeFailure logs a failed state update: the first one, then every power of two, so a
// broken store is visible in the logs without logging every request.
func (p *plugin) storeFailure(rs *ruleState, err error) {
	p.failures++
	rs.m.storeErrors.Increment(1)
	if p.failures&(p.failures-1) == 0 {
		mode := string(p.cfg.FailureMode)
		if rs.rule.Shadow {
			mode = "allow" // a shadow rule never denies, whatever failure_mode says
		}
		abi.LogWarn("ratelimit: rule " + strconv.Quote(rs.rule.Name) + ": state update failed (" + strconv.FormatUint(p.failures, 10) +
			" so far), applying failure_mode " + strconv.Quote(mode) + ": " + err.Error())
	}
}
