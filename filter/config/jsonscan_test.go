package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

// encodingJSONError is the error decodeTree returned when it checked the syntax with
// encoding/json's Decoder (before the scanner was copied into jsonscan.go), for documents
// whose syntax is wrong; "" for a document encoding/json accepts as one value.
func encodingJSONError(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			return "invalid JSON at byte " + strconv.FormatInt(se.Offset-1, 10) + ": " + se.Error()
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return "invalid JSON: unexpected end of input"
		default:
			return "invalid JSON: " + err.Error()
		}
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return "invalid JSON: unexpected data after the top-level value, which ends at byte " + strconv.FormatInt(end, 10)
	}
	return ""
}

var syntaxErrorSeeds = []string{
	``, ` `, `{`, `[`, `"`, `"abc`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,`, `[1,`, `[1,]`, `{,}`,
	`{"a" 1}`, `{"a":1 "b":2}`, `[1 2]`, `{"rules":[}`, `}`, `]`, `x`, `tru`, `trux`, `nul`,
	`fals`, `falsy`, `-`, `-x`, `01`, `1.`, `1.x`, `1e`, `1e+`, `1ex`, `"\x"`, `"\u12"`,
	`"\u12g4"`, "\"a\x01\"", "\"\x7f\"", `{"a":1}}`, `{"a":1} x`, `1 2`, `1x`, `[]x`, `"a"b`,
	"{\n  \"a\": [1,\n  2,,\n]}", `'a'`, `{'a':1}`, "\xff", `{"a":-}`, `[.5]`, `+1`,
	`{"a":1}   `, ` [ ] `, `0`, `-0.5e-3`, `{"a":"\ud800"}`, "\t\r\n{}\n",
	// Every byte of each literal wrong (one scanner state reads all three words).
	`tx`, `trx`, `trUe`, `fx`, `fax`, `falx`, `falsx`, `nx`, `nux`, `nulx`, `[t]`, `{"a":nu}`,
	`[true,false,null,tru]`, `truee`, `nulll`,
}

// The syntax errors of the copied scanner are encoding/json's, byte for byte: message and
// offset, for every seed here and every input the fuzzer finds (`go test -fuzz
// FuzzSyntaxErrorsAsEncodingJSON`).
func FuzzSyntaxErrorsAsEncodingJSON(f *testing.F) {
	for _, s := range syntaxErrorSeeds {
		f.Add([]byte(s))
	}
	// Deeper than encoding/json's 10,000 levels: its "exceeded max depth" at the same byte.
	f.Add([]byte(strings.Repeat("[", 10001)))
	f.Add([]byte(strings.Repeat(`{"a":`, 10001)))
	f.Fuzz(func(t *testing.T, data []byte) {
		want := encodingJSONError(data)
		_, err := decodeTree(data, func(string, string) {})
		got := errString(err)
		if want == "" {
			// encoding/json accepts it; decodeTree refuses only nesting deeper than maxDepth.
			if err != nil && !errors.Is(err, errTooDeep) {
				t.Fatalf("%q: decodeTree error %q, encoding/json accepts it", data, got)
			}
			return
		}
		if got != want {
			t.Fatalf("%q:\n got  %q\n want %q", data, got, want)
		}
	})
}
