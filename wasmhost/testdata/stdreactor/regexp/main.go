// Command regexp is an empty Go reactor that links regexp as the filter does (compiling a
// pattern known only at run time), for BenchmarkV8Start: what regexp's initialisers (the
// unicode tables regexp/syntax refers to) add to _initialize.
package main

import "regexp"

// input is set by no one: it keeps the call below from being folded away.
var input string

func main() { regexp.MustCompile(input) }
