// Command siphash is an empty Go reactor that links github.com/dchest/siphash as the filter's
// key table does, for BenchmarkV8Start: what it adds to _initialize.
package main

import "github.com/dchest/siphash"

// input is set by no one: it keeps the call below from being folded away.
var input []byte

func main() { siphash.Hash128(1, 2, input) }
