// Command passthrough is a filter that does nothing: every callback continues. Benchmarks load
// it beside the rate limiter to separate the filter's own cost from the host's.
package main

import (
	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

type plugin struct{ types.DefaultPluginContext }

func (*plugin) NewHttpContext(uint32) types.HttpContext { return &types.DefaultHttpContext{} }

func init() { abi.SetVMContext(&vm{}) }

func main() {}
