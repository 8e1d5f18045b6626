// Command passthrough is a filter that does nothing: every callback continues. Benchmarks load
// it beside the rate limiter to separate the filter's own cost from the host's.
//
// With the plugin configuration {"read_body":true} it reads every response body chunk through
// the ABI and does nothing with it: the floor of a filter that reads the body.
package main

import (
	"bytes"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

type plugin struct {
	types.DefaultPluginContext
	readBody bool
}

func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	c, _ := abi.GetPluginConfiguration()
	p.readBody = bytes.Contains(c, []byte(`"read_body":true`))
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext {
	if p.readBody {
		return &bodyReader{}
	}
	return &types.DefaultHttpContext{}
}

// bodyReader reads each response body chunk and drops it.
type bodyReader struct{ types.DefaultHttpContext }

func (*bodyReader) OnHttpResponseBody(bodySize int, _ bool) types.Action {
	abi.GetHttpResponseBody(0, bodySize)
	return types.ActionContinue
}

func init() { abi.SetVMContext(&vm{}) }

func main() {}
