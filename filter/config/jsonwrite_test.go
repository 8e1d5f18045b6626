package config

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
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
			"\"algorithm\":\"fixed_window\",\"limit\":9,\"window\":\"1m\",\"cost\":{\"header\":\"x-cost\",\"default\":2,\"max\":9}}]}"))
	return seeds
}

// sameJSON reports whether a and b are valid JSON that hold the same values with object
// members in the same order: both are formatted by jsontext, which writes strings with
// minimal escaping (so "\u003c" and "<", "\ufffd" and U+FFFD compare equal) and keeps numbers
// and member order as they are.
func sameJSON(a, b []byte) (bool, error) {
	fa, err := jsontext.AppendFormat(nil, a)
	if err != nil {
		return false, err
	}
	fb, err := jsontext.AppendFormat(nil, b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(fa, fb), nil
}

// The configuration's writer writes the JSON that json.Marshal writes for the same structs
// (the struct tags are its specification), up to the escaping of strings: the same members
// in the same order with the same values, for every seed and every configuration the fuzzer
// makes Parse accept (`go test -fuzz FuzzEncodeAsEncodingJSON`).
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
		if same, err := sameJSON(got, want); !same {
			t.Fatalf("writer (%v):\n%s\nencoding/json:\n%s", err, got, want)
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

// The comparison tells apart what it must: a different value, member order or number.
func TestSameJSON(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"a":"<\u2028>","b":[1,2]}`, `{"a":"\u003c\u2028\u003e","b":[1,2]}`, true},
		{"\"\xff\"", `"\ufffd"`, false}, // invalid UTF-8 is refused, not read as U+FFFD
		{"\"\uFFFD\"", `"\ufffd"`, true},
		{`{"a":1,"b":2}`, `{"b":2,"a":1}`, false},
		{`{"a":"x"}`, `{"a":"y"}`, false},
		{`[0.5]`, `[5e-1]`, false},
		{`[null]`, `[]`, false},
	} {
		same, err := sameJSON([]byte(c.a), []byte(c.b))
		if same != c.same {
			t.Errorf("sameJSON(%s, %s) = %v (%v), want %v", c.a, c.b, same, err, c.same)
		}
	}
}

// Floats are written as json.Marshal writes them, across the exponent thresholds.
func TestAppendFloatAsEncodingJSON(t *testing.T) {
	for _, f := range []float64{0, 0.05, 1, 0.1 + 0.2, 1e-6, 9.99e-7, 1e-7, 1.5e-300, 1e20, 1e21, 123456789e15,
		-0.5, -1e-9, math.SmallestNonzeroFloat64, math.MaxFloat64, 5e-324} {
		want, _ := json.Marshal(f)
		if got := jsontext.AppendFloat(nil, f, 64); string(got) != string(want) {
			t.Errorf("%v: got %s, want %s", f, got, want)
		}
	}
}
