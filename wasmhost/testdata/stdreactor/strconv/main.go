// Command strconv is an empty Go reactor that links strconv's parsers and formatters the filter
// uses, for BenchmarkV8Start: what they add to _initialize.
package main

import "strconv"

// input is set by no one: it keeps the calls below from being folded away.
var input string

func main() {
	n, _ := strconv.ParseInt(input, 10, 64)
	f, _ := strconv.ParseFloat(input, 64)
	input = strconv.Quote(input) + strconv.FormatInt(n, 10) + strconv.FormatFloat(f, 'g', -1, 64)
}
