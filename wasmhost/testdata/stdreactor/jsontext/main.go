// Command jsontext is an empty Go reactor that links github.com/go-json-experiment/json/jsontext
// as the filter's configuration parser does (a decoder with its options), for
// BenchmarkV8Start: what its initialisers add to _initialize.
package main

import (
	"bytes"

	"github.com/go-json-experiment/json/jsontext"
)

// input is set by no one: it keeps the calls below from being folded away.
var input []byte

func main() {
	d := jsontext.NewDecoder(bytes.NewBuffer(input), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	d.ReadToken()
}
