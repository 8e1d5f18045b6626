package config

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// encodeSeeds are the configurations the encoder is compared on: every example, the
// benchmark's configuration, and strings that encoding/json escapes (HTML characters,
// control characters, U+2028 and U+2029, invalid UTF-8).
func encodeSeeds(tb testing.TB) [][]byte {
	files, _ := filepath.Glob("testdata/examples/*.json")
	var seeds [][]byte
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, data)
	}
	seeds = append(seeds, []byte(benchConfigJSON),
		[]byte(`{"deny":{"body":"<b>&amp;</b> \u2028\u2029 \u0001\b\f\n\r\t \"\\ é😀","headers":{"x-b":"2","x-a":"<1>"}},`+
			`"rules":[{"name":"r","description":"a\u007fb","key":[{"source":"header","name":"x-k","default":"\u0000"}],`+
			`"match":{"headers":[{"name":"x","exact":"<>"},{"name":"y","present":false,"invert":true}],"path":{"prefix":"/a&b"}},`+
			`"algorithm":"token_bucket","limit":5,"window":"1s"}]}`),
		[]byte("{\"rules\":[{\"name\":\"r\",\"description\":\"\xff\xfe bad\",\"key\":[{\"source\":\"const\",\"value\":\"\xc3\"}],"+
			"\"algorithm\":\"fixed_window\",\"limit\":5,\"window\":\"1m\",\"cost\":{\"header\":\"x-cost\",\"default\":2,\"max\":9}}]}"))
	return seeds
}

// The hand-written encoder writes exactly what json.Marshal writes for the same structs
// (the struct tags are its specification), for every seed and every configuration the
// fuzzer makes Parse accept (`go test -fuzz FuzzEncodeAsEncodingJSON`).
func FuzzEncodeAsEncodingJSON(f *testing.F) {
	for _, s := range encodeSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		jc := c.encode()
		want, err := json.Marshal(jc)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := c.MarshalJSON()
		if !bytes.Equal(got, want) {
			t.Fatalf("hand-written encoder:\n%s\nencoding/json:\n%s", got, want)
		}
	})
}

// Every seed parses, so that the comparison above is not vacuous.
func TestEncodeSeedsParse(t *testing.T) {
	for i, s := range encodeSeeds(t) {
		if _, err := Parse(s); err != nil {
			t.Errorf("seed %d: %v", i, err)
		}
	}
}

// Floats are formatted as encoding/json formats them, across the exponent thresholds.
func TestAppendJSONFloatAsEncodingJSON(t *testing.T) {
	for _, f := range []float64{0, 0.05, 1, 0.1 + 0.2, 1e-6, 9.99e-7, 1e-7, 1.5e-300, 1e20, 1e21, 123456789e15,
		-0.5, -1e-9, math.SmallestNonzeroFloat64, math.MaxFloat64, 5e-324} {
		want, _ := json.Marshal(f)
		if got := appendJSONFloat(nil, f); string(got) != string(want) {
			t.Errorf("%v: got %s, want %s", f, got, want)
		}
	}
	if got := string(appendJSONFloat(nil, math.NaN())); !strings.EqualFold(got, "null") {
		t.Errorf("NaN: %s", got)
	}
}
