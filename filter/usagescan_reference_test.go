package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// referenceUsage is the usage scanner's specification, written with encoding/json: the body
// split into documents (for an event stream, into events as usageScanner reads them: the
// data lines of an event joined by newlines, a blank line or the body's end dispatching it),
// each document walked in order, the last value at each pointer kept. valid is false when the
// body is not JSON (for an event stream: an event whose data is neither JSON documents nor
// "[DONE]"); the scanner is then only required to agree with itself however the body is cut.
// A number at the top level must be followed by a space or the end: the scanner reads "1-2"
// as one number that is not a usage, where a decoder of a stream of documents finds two.
func referenceUsage(ptrs [][]string, sse bool, body []byte) (usage int64, reported, valid bool) {
	vals := make([]int64, len(ptrs))
	found := make([]uint8, len(ptrs))
	visit := func(path []string, v any) {
		for i, p := range ptrs {
			if !slices.Equal(p, path) {
				continue
			}
			found[i] = ptrInvalid
			if n, ok := v.(json.Number); ok && wholeNumber.MatchString(string(n)) {
				// A whole number too large for an int64 saturates at config.DecimalCeiling.
				vals[i] = config.DecimalCeiling
				if len(n) <= 18 {
					vals[i], _ = strconv.ParseInt(string(n), 10, 64)
				}
				found[i] = ptrValue
			}
		}
	}
	docs := [][]byte{body}
	if sse {
		docs = sseEvents(body)
	}
	for _, d := range docs {
		if !walkDocuments(d, visit) && string(bytes.TrimSpace(d)) != "[DONE]" {
			return 0, false, false
		}
	}
	for i := range ptrs {
		if found[i] != ptrValue {
			return 0, false, true
		}
		usage += vals[i]
	}
	return usage, len(ptrs) > 0, true
}

var wholeNumber = regexp.MustCompile(`^[0-9]+$`)

// sseEvents returns the data of each event of an event stream.
func sseEvents(body []byte) [][]byte {
	var events [][]byte
	var data []string
	dispatch := func() {
		if len(data) > 0 {
			events = append(events, []byte(strings.Join(data, "\n")))
		}
		data = nil
	}
	s := strings.ReplaceAll(strings.ReplaceAll(string(body), "\r\n", "\n"), "\r", "\n")
	for _, line := range strings.Split(s, "\n") {
		field, value, ok := strings.Cut(line, ":")
		switch {
		case line == "":
			dispatch()
		case ok && field == "data":
			data = append(data, strings.TrimPrefix(value, " "))
		}
	}
	dispatch()
	return events
}

// walkDocuments calls visit with the path and value of every value of the JSON documents in
// b, in order (a container's value is its opening json.Delim), and reports whether b is JSON.
func walkDocuments(b []byte, visit func([]string, any)) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return true
		}
		if err != nil || walkValue(dec, tok, nil, visit) != nil {
			return false
		}
		if _, number := tok.(json.Number); number {
			if end := dec.InputOffset(); end < int64(len(b)) && !strings.ContainsRune(" \t\r\n", rune(b[end])) {
				return false
			}
		}
	}
}

var errTruncated = errors.New("truncated")

func walkValue(dec *json.Decoder, tok json.Token, path []string, visit func([]string, any)) error {
	visit(path, tok)
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	for i := 0; dec.More(); i++ {
		elem := strconv.Itoa(i)
		if d == '{' {
			k, err := dec.Token()
			if err != nil {
				return errTruncated
			}
			elem = k.(string)
		}
		v, err := dec.Token()
		if err != nil {
			return errTruncated
		}
		if err := walkValue(dec, v, append(path[:len(path):len(path)], elem), visit); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return errTruncated
	}
	return nil
}

// referencePointers are the pointers the comparisons look for: nested keys, keys that escape
// into "/" and "~", an array index, a key that is a prefix of another.
var referencePointers = []string{"/usage/total_tokens", "/message/usage/input_tokens", "/usage/output_tokens",
	"/a~1b/c~0", "/a~1b", "/0/1", "/choices/1/n", "/usage/total"}

// checkAgainstReference scans body whole and cut in the given sizes, and fails unless every
// cut agrees with the whole, and the whole with referenceUsage where the body is JSON.
func checkAgainstReference(t *testing.T, body []byte, sse bool, cuts ...int) (valid bool) {
	t.Helper()
	spec := pointers(referencePointers...)
	for i := range spec.Pointers {
		// Each pointer alone, so that a usage is reported whenever one is found.
		one := &[][]string{spec.Pointers[i]}
		whole, ok := scanPointers(*one, sse, body, 0)
		for _, n := range cuts {
			if got, gok := scanPointers(*one, sse, body, n); got != whole || gok != ok {
				t.Fatalf("%s, chunks of %d: %d %v, whole: %d %v\n%q", referencePointers[i], n, got, gok, whole, ok, body)
			}
		}
		want, wok, v := referenceUsage(*one, sse, body)
		if v && (want != whole || wok != ok) {
			t.Fatalf("%s: scanner %d %v, encoding/json %d %v\n%q", referencePointers[i], whole, ok, want, wok, body)
		}
		valid = v
	}
	return valid
}

// scanPointers feeds body to a scanner of ptrs in chunks of size n (whole when n is 0).
func scanPointers(ptrs [][]string, sse bool, body []byte, n int) (int64, bool) {
	var s usageScanner
	s.reset(ptrs, sse)
	if n == 0 {
		n = len(body) + 1
	}
	for len(body) > 0 {
		k := min(n, len(body))
		s.write(body[:k])
		body = body[k:]
	}
	s.end()
	return s.usage()
}

// The scanner agrees with encoding/json on random JSON documents and event streams that hold
// the pointers' keys, plain and escaped, among values of every kind, cut at random.
func TestUsageScannerMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	valid := 0
	for range 4000 {
		sse := r.IntN(2) == 0
		var body []byte
		if sse {
			body = randomEventStream(r)
		} else {
			for range 1 + r.IntN(3) {
				body = append(append(body, randomValue(r, 0)...), " \n\t"[r.IntN(3)])
			}
			body = bytes.ReplaceAll(body, []byte{1}, nil)
		}
		if checkAgainstReference(t, body, sse, 1+r.IntN(5), 1+r.IntN(64), 1+r.IntN(1024)) {
			valid++
		}
	}
	if valid < 3600 {
		t.Errorf("only %d of 4000 random bodies are JSON: the comparison tests too little", valid)
	}
}

// randomEventStream returns an event stream of random events: JSON documents split over data
// lines between their tokens, comments, other fields, "[DONE]", with every kind of line end.
func randomEventStream(r *rand.Rand) []byte {
	ends := []string{"\n", "\r\n", "\r"}
	end := ends[r.IntN(3)]
	if r.IntN(4) == 0 {
		end = "\r\n\n" // every line followed by a blank one, each event one line
	}
	var b []byte
	for range 1 + r.IntN(6) {
		switch r.IntN(6) {
		case 0:
			b = append(b, ": a comment with \"usage\":{\"total_tokens\":5}"+end...)
		case 1:
			b = append(b, "event: content_block_delta"+end...)
		case 2:
			b = append(b, end+"data: [DONE]"+end+end...) // an event of its own
		default:
			doc := randomValue(r, 0)
			// Cut the document into data lines at spaces between its tokens.
			lines := strings.Split(doc, "\u0001")
			for _, l := range lines {
				sep := "data: "
				if r.IntN(3) == 0 {
					sep = "data:"
				}
				b = append(b, sep+l+end...)
			}
		}
		if r.IntN(4) > 0 {
			b = append(b, end...) // the blank line that dispatches the event
		}
	}
	return bytes.ReplaceAll(b, []byte{1}, nil)
}

var (
	randomKeys = []string{"usage", "total_tokens", "message", "input_tokens", "output_tokens", "a/b", "c~",
		"choices", "n", "total", "0", "1", "id", "delta", "content", ""}
	randomStrings = []string{"", "token token token", `a \"quoted\" {word}`, `back\\slash\\`, `line\nbreak`,
		`\u00e9t\u00E9 \/ \b\f\r\t`, "\u00e9\u4e16", `[\"usage\":{\"total_tokens\":1}]`, strings.Repeat("x", 300)}
	randomNumbers = []string{"0", "7", "42", "123456789012345678", "1234567890123456789", "-3", "1.5", "2e3",
		"-0", "0.0", "10E-2", "99999999999999999999", "-99999999999999999999", "99999999999999999999.5"}
)

// randomValue returns a random JSON value; a byte 1 marks a place between tokens where an
// event stream may cut it into data lines (randomEventStream removes the others).
func randomValue(r *rand.Rand, depth int) string {
	ws := func() string { return []string{"", " ", "\u0001", "\t", " \u0001 "}[r.IntN(5)] }
	k := r.IntN(11)
	if depth > 5 {
		k = 6 + k%4
	}
	switch {
	case k == 10:
		// A usage at one of the pointers, as an API writes it.
		return "{" + escapedKey(r, "usage") + ":{" + escapedKey(r, []string{"total_tokens", "output_tokens", "total"}[r.IntN(3)]) +
			":" + randomNumbers[r.IntN(len(randomNumbers))] + "}}"
	case k < 3:
		var fields []string
		for range r.IntN(5) {
			fields = append(fields, ws()+randomKey(r)+ws()+":"+ws()+randomValue(r, depth+1)+ws())
		}
		return "{" + strings.Join(fields, ",") + "}"
	case k < 6:
		var elems []string
		for range r.IntN(4) {
			elems = append(elems, ws()+randomValue(r, depth+1)+ws())
		}
		return "[" + strings.Join(elems, ",") + "]"
	case k < 8:
		return randomNumbers[r.IntN(len(randomNumbers))]
	case k < 9:
		return []string{"true", "false", "null"}[r.IntN(3)]
	default:
		return `"` + randomStrings[r.IntN(len(randomStrings))] + `"`
	}
}

// randomKey returns one of randomKeys, written plain or with some characters escaped.
func randomKey(r *rand.Rand) string { return escapedKey(r, randomKeys[r.IntN(len(randomKeys))]) }

// escapedKey returns k as a JSON string, written plain or with some characters escaped.
func escapedKey(r *rand.Rand, k string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range k {
		switch {
		case c == '/' && r.IntN(2) == 0:
			b.WriteString(`\/`)
		case r.IntN(6) == 0:
			b.WriteString(`\u` + strconv.FormatInt(0x10000+int64(c), 16)[1:])
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
