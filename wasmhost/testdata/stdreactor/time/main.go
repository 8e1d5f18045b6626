// Command time is an empty Go reactor that links time as the filter does (durations, the
// clock), for BenchmarkV8Start: what time's initialisers (syscall's environment and
// internal/godebug's settings) add to _initialize.
package main

import "time"

// input is set by no one: it keeps the call below from being folded away.
var input string

func main() {
	d, _ := time.ParseDuration(input)
	input = time.Duration(time.Now().UnixNano() + int64(d)).String()
}
