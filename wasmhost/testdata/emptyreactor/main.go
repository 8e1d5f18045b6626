// Command emptyreactor is the smallest standard-Go wasip1 reactor: no filter, no imports. The
// V8 benchmarks time its _initialize as the floor of a Go module's start-up, beside the
// filter's first VM.
package main

func main() {}
