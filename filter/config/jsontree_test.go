package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// plain converts a tree to the values encoding/json decodes into an interface (numbers as
// json.Number), so that the two decoders can be compared.
func (n *node) plain() any {
	switch n.kind {
	case kindNull:
		return nil
	case kindBool:
		return n.b
	case kindNumber:
		return json.Number(n.s)
	case kindString:
		return n.s
	case kindObject:
		m := make(map[string]any, len(n.members))
		for _, mb := range n.members {
			m[mb.key] = mb.val.plain()
		}
		return m
	default:
		a := make([]any, 0, len(n.elems))
		for _, e := range n.elems {
			a = append(a, e.plain())
		}
		return a
	}
}

// FuzzDecodeTree checks the tree builder against encoding/json: it accepts what encoding/json
// accepts as one value (but for nesting deeper than maxDepth), every document it accepts
// without duplicate keys decodes to the same values (escapes, surrogates, invalid UTF-8,
// numbers), every error but the nesting bound gives a byte offset in the document (which
// Parse turns into a line and a column), it leaves the document as it was (the tokenizer reads
// it in place) and it never panics.
func FuzzDecodeTree(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"a":[1,-2.5e+3,true,false,null,"x"]}`, ` { "a" : { "b" : [ ] } } `,
		`"\u00e9\ud83d\ude00\n\"\\\/"`, "\"\xff\xfe\"", `{"\u0061":1,"b\"":"c"}`, `[[[[1]]]]`, `0`, `-0.0E-0`,
		`{"a":1,"a":2}`, `{"rules":[}`, `[1,]`, `{"a":"\ud800"}`, `"\ud800\u0041"`, `"\udc00"`,
		``, ` `, `{`, `"abc`, `{"a" 1}`, `{"a":1 "b":2}`, `[1 2]`, `tru`, `trux`, `01`, `1.`, `1ex`,
		`"\x"`, `"\u12g4"`, "\"a\x01\"", "\"\x7f\"", `{"a":1}}`, `1 2`, `"a"b`, "\xff", `+1`,
		"{\n  \"a\": [1,\n  2,,\n]}", `{'a':1}`, `[true,false,null,tru]`, `nulll`,
		strings.Repeat("[", 40), strings.Repeat(`{"a":`, 40),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dups := 0
		orig := bytes.Clone(data)
		n, jerr := decodeTree(data, func(string, string) { dups++ })
		if !bytes.Equal(data, orig) {
			t.Fatalf("decodeTree changed the document %q to %q", orig, data)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		werr := dec.Decode(&want)
		if werr == nil {
			if _, err := dec.Token(); err != io.EOF {
				werr = errors.New("trailing data") // decodeTree must refuse it too
			}
		}
		tooDeep := jerr != nil && strings.Contains(jerr.Msg, "deeper")
		if (jerr == nil) != (werr == nil) && !tooDeep {
			t.Fatalf("decodeTree error %v, encoding/json error %v", jerr, werr)
		}
		if jerr != nil {
			// Parse refuses a document of white space alone before decodeTree reads it.
			if !tooDeep && len(bytes.Trim(data, " \t\r\n")) > 0 && !strings.Contains(jerr.Msg, "(line ") {
				t.Fatalf("%q: error %q gives no byte offset in the document", data, jerr.Msg)
			}
			return
		}
		if dups > 0 {
			return
		}
		if got := n.plain(); !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeTree %#v, encoding/json %#v", got, want)
		}
	})
}

// A document of the smallest values at the size cap builds in linear time.
func TestDecodeTreeManyTokens(t *testing.T) {
	data := []byte(`{"x":[` + strings.Repeat("0,", MaxConfigBytes/2-10) + `0]}`)
	start := cpuTime(t)
	n, jerr := decodeTree(data, func(string, string) {})
	took := cpuTime(t) - start
	if jerr != nil || took > quickly {
		t.Fatalf("err %v after %v", jerr, took)
	}
	t.Logf("%d values: %v", len(n.members[0].val.elems), took)
}
