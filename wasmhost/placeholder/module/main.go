// Command module is the placeholder filter as a .wasm module of its own. The wasmhost tests
// load it to prove the ABI binding and the host end to end with a filter whose behaviour is
// trivial to predict, independently of the rate limiter.
package main

import (
	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/placeholder"
)

func init() {
	abi.SetVMContext(placeholder.NewVMContext())
}

func main() {}
