// Command netip is an empty Go reactor that links net/netip as the filter does (parsing an
// address), for BenchmarkV8Start: what netip's initialisers (unique and weak) add to
// _initialize.
package main

import "net/netip"

// input is set by no one: it keeps the call below from being folded away.
var input string

func main() { netip.ParseAddr(input) }
