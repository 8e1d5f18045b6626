package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
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

// FuzzDecodeTree checks the tree builder against encoding/json: every document it accepts
// without duplicate keys decodes to the same values (escapes, surrogates, invalid UTF-8,
// numbers), and it never panics.
func FuzzDecodeTree(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"a":[1,-2.5e+3,true,false,null,"x"]}`, ` { "a" : { "b" : [ ] } } `,
		`"\u00e9\ud83d\ude00\n\"\\\/"`, "\"\xff\xfe\"", `{"\u0061":1,"b\"":"c"}`, `[[[[1]]]]`, `0`, `-0.0E-0`,
		`{"a":1,"a":2}`, `{"rules":[}`, `[1,]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dups := 0
		n, err := decodeTree(data, func(string, string) { dups++ })
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		werr := dec.Decode(&want)
		if werr == nil {
			if _, err := dec.Token(); err != io.EOF {
				werr = errors.New("trailing data") // decodeTree must refuse it too
			}
		}
		// Only nesting deeper than maxDepth is refused beyond what encoding/json refuses.
		if (err == nil) != (werr == nil) && !strings.Contains(errString(err), "deeper") {
			t.Fatalf("decodeTree error %v, encoding/json error %v", err, werr)
		}
		if err != nil || dups > 0 {
			return
		}
		if got := n.plain(); !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeTree %#v, encoding/json %#v", got, want)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A document of the smallest values at the size cap builds in linear time.
func TestDecodeTreeManyTokens(t *testing.T) {
	data := []byte(`{"x":[` + strings.Repeat("0,", MaxConfigBytes/2-10) + `0]}`)
	start := time.Now()
	n, err := decodeTree(data, func(string, string) {})
	took := time.Since(start)
	t.Logf("%d values: %v", len(n.members[0].val.elems), took)
	if err != nil || took > quickly {
		t.Fatalf("err %v after %v", err, took)
	}
}
