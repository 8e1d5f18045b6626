package sharedstate_test

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/storetest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) sharedstate.Store { return sharedstate.NewMemory() },
		storetest.Options{Concurrent: true})
}

// The host store under the SDK's emulator: the emulator differs from Envoy only in how it
// treats cas 0, which the suite is told about.
func TestHostConformanceUnderProxytest(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sharedstate.Store {
		opt := proxytest.NewEmulatorOption().WithVMContext(&types.DefaultVMContext{})
		_, reset := proxytest.NewHostEmulator(opt)
		t.Cleanup(reset)
		return sharedstate.Host{}
	}, storetest.Options{ZeroCasIsConditional: true})
}
