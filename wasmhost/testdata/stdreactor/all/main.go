// Command all is an empty Go reactor that links every package the filter imports from outside
// the repository, used as the filter uses them, for BenchmarkV8Start: the standard packages'
// and modules' share of the filter's _initialize, apart from the filter's own.
package main

import (
	"bytes"
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"time"
	"unicode/utf16"

	"github.com/dchest/siphash"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// input is set by no one: it keeps the calls below from being folded away.
var input string

func main() {
	regexp.MustCompile(input)
	netip.ParseAddr(input)
	d := jsontext.NewDecoder(bytes.NewBufferString(input), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	d.ReadToken()
	n, _ := strconv.ParseInt(input, 10, 64)
	f, _ := strconv.ParseFloat(input, 64)
	h := fnv.New64a()
	h.Write([]byte(input))
	w, _ := time.ParseDuration(input)
	lo, _ := siphash.Hash128(rand.Uint64(), h.Sum64()+uint64(time.Now().UnixNano()), []byte(input))
	s := []string{input, strconv.Quote(input), strconv.FormatFloat(f, 'g', -1, 64), w.String()}
	sort.Strings(s)
	r := utf16.Decode([]uint16{uint16(n)})[0]
	input = s[0] + string(r) + strconv.FormatUint(lo^binary.LittleEndian.Uint64([]byte(input)), 10) + types.ErrorStatusNotFound.Error()
}
