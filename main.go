// Command ratelimit is the proxy-wasm rate-limiting filter for Envoy. Built with
// `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`, it is a WASI reactor: the host runs
// _initialize (and so init) but never main, so this file only wires the filter to the ABI.
package main

import (
	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter"
)

func init() {
	abi.SetVMContext(filter.NewVMContext())
}

func main() {}
