package config

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The config is decoded into this small tree, rather than straight into structs, because
// the parser must name the JSON path of every problem: encoding/json's
// DisallowUnknownFields and type errors carry no path we can rely on, and it silently keeps
// the last of two duplicate keys, which would let `"limit": 10, "limit": 100000` slip by.

// kind is the JSON type of a node.
type kind uint8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindObject
	kindArray
)

// node is one JSON value. Objects keep their members in document order so that errors are
// reported in the order a person reads the file.
type node struct {
	kind    kind
	b       bool
	s       string // string value, or the literal text of a number
	members []member
	elems   []*node
}

type member struct {
	key string
	val *node
}

// maxDepth bounds nesting. The deepest valid config is about six levels deep; the bound
// keeps a hostile document from recursing without limit.
const maxDepth = 32

var errTooDeep = errors.New("nesting is deeper than 32 levels")

// decodeTree parses data as exactly one JSON value. Duplicate object keys are reported
// through dup with the path of the duplicate, and the first occurrence is kept.
//
// The syntax is first checked in one pass by encoding/json's scanner (copied in
// jsonscan.go), without building anything, which keeps its error messages and byte offsets;
// the tree is then built from the bytes known to be valid JSON. Building the tree from
// json.Decoder's tokens instead cost about 4 us per token in a Wasm VM, over 2 s for a 1 MiB
// document of small values.
func decodeTree(data []byte, dup func(path, key string)) (*node, error) {
	end, err := scanValue(data)
	if err != nil {
		return nil, jsonError(err)
	}
	for i := end; i < len(data); i++ {
		if !isSpace(data[i]) {
			return nil, trailingData(end)
		}
	}
	d := decoder{data: data[:end], dup: dup}
	n, err := d.value(0)
	if err != nil {
		return nil, jsonError(err)
	}
	return n, nil
}

// trailingData is decodeTree's error for data after the top-level value, which ends at byte
// end. It is out of decodeTree's line: V8 in Envoy compiles a function on its first call.
//
//go:noinline
func trailingData(end int) error {
	return errors.New("invalid JSON: unexpected data after the top-level value, which ends at byte " + strconv.Itoa(end))
}

// errUnexpectedEnd is scanValue's error for input that ends before a value does (or holds
// none), which json.Decoder reports as io.EOF or io.ErrUnexpectedEOF.
var errUnexpectedEnd = errors.New("unexpected end of input")

// scanValue checks that data starts with one valid JSON value (after optional whitespace)
// and returns the offset just past it, as json.Decoder.Decode followed by InputOffset would:
// a number ends at the first byte that cannot continue it, an object or array at its closing
// bracket. A syntax error carries the 0-based offset of the offending byte.
func scanValue(data []byte) (int, error) {
	var s scanner
	s.reset()
	for i := 0; i < len(data); i++ {
		c := data[i]
		s.bytes++
		switch s.step(&s, c) {
		case scanEnd:
			// The end is seen one byte late: the value ended before c.
			return i, nil
		case scanEndObject, scanEndArray:
			// json.Decoder does not wait for the byte after a closing bracket that ends the
			// top-level value; it feeds a space instead, and so does this.
			if stateEndValue(&s, ' ') == scanEnd {
				return i + 1, nil
			}
		case scanError:
			se := s.err.(*syntaxError)
			// The scanner counts the offending byte in the offset; report where it is
			// (0-based), as the rest of the parser's messages do.
			se.Offset--
			return 0, se
		}
	}
	if s.step(&s, ' ') == scanEnd {
		return len(data), nil
	}
	return 0, errUnexpectedEnd
}

// decoder builds the tree from valid JSON. It keeps the path to the current value as a
// stack of segments and renders it only when a duplicate key is reported: building every
// value's path string up front would cost, for a value under a long key, the length of that
// key again for every element below it, which a 1 MiB document can turn into gigabytes.
type decoder struct {
	data []byte
	pos  int
	dup  func(path, key string)
	segs []segment
}

// segment is one step of a path: an object key, or an array index when isIndex is set.
type segment struct {
	key     string
	index   int
	isIndex bool
}

// path renders the current path the way joinKey and joinIndex would have built it.
func (d *decoder) path() string {
	path := ""
	for _, s := range d.segs {
		if s.isIndex {
			path = joinIndex(path, s.index)
		} else {
			path = joinKey(path, s.key)
		}
	}
	return path
}

// indexAfter is the member count from which an object indexes its keys in a map. Below it
// a linear scan is cheaper than hashing, and every object of a valid config is that small;
// above it the map keeps duplicate detection linear in the document (a scan per key made
// an object of 80,000 keys take seconds).
const indexAfter = 16

// jsonError makes the scanner's errors say where the problem is.
func jsonError(err error) error {
	// errors.AsType, not errors.As: errors.As links reflection's assignability checks
	// (internal/reflectlite, about 20 KB of the module).
	se, isSyntax := errors.AsType[*syntaxError](err)
	switch {
	case isSyntax:
		return errors.New("invalid JSON at byte " + strconv.FormatInt(se.Offset, 10) + ": " + se.Error())
	case err == errUnexpectedEnd:
		return errors.New("invalid JSON: unexpected end of input")
	default:
		return &wrapError{msg: "invalid JSON: " + err.Error(), err: err}
	}
}

// wrapError is an error with its own message that unwraps to the error it reports, as
// fmt.Errorf with %w makes one (fmt is not linked into the module: see jsonscan.go).
type wrapError struct {
	msg string
	err error
}

func (e *wrapError) Error() string { return e.msg }
func (e *wrapError) Unwrap() error { return e.err }

// skipSpace moves past JSON whitespace. It is kept out of line: value skips whitespace at
// five places, and V8 in Envoy compiles value, with whatever is inlined into it, in every
// VM's configure.
//
//go:noinline
func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// next skips whitespace and returns the next byte without consuming it. The input is valid
// JSON, so a value or a delimiter always follows where the grammar expects one.
func (d *decoder) next() byte {
	d.skipSpace()
	return d.data[d.pos]
}

func (d *decoder) value(depth int) (*node, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	// One allocation site for every kind of value, rather than one per case: each call site
	// is code that V8 in Envoy compiles with value in every VM's configure.
	n := new(node)
	switch c := d.next(); c {
	case '{':
		d.pos++
		n.kind = kindObject
		var index map[string]struct{}
		for d.next() != '}' {
			if d.data[d.pos] == ',' {
				d.pos++
				d.skipSpace()
			}
			key, err := d.str()
			if err != nil {
				return nil, err
			}
			d.next() // the ':'
			d.pos++
			d.segs = append(d.segs, segment{key: key})
			val, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			// The map of a large object is made and used by functions of their own, out of
			// value's line: V8 in Envoy compiles a function on its first call, and no object
			// of a valid configuration is that large.
			if len(n.members) >= indexAfter {
				index = d.addIndexed(n, index, key, val)
			} else if n.lookup(key) != nil {
				d.duplicate(key)
			} else {
				n.members = append(n.members, member{key: key, val: val})
			}
			d.segs = d.segs[:len(d.segs)-1]
		}
		d.pos++
		return n, nil
	case '[':
		d.pos++
		n.kind = kindArray
		for d.next() != ']' {
			if d.data[d.pos] == ',' {
				d.pos++
			}
			d.segs = append(d.segs, segment{index: len(n.elems), isIndex: true})
			val, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			d.segs = d.segs[:len(d.segs)-1]
			n.elems = append(n.elems, val)
		}
		d.pos++
		return n, nil
	case '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		n.kind, n.s = kindString, s
	case 't':
		d.pos += len("true")
		n.kind, n.b = kindBool, true
	case 'f':
		d.pos += len("false")
		n.kind = kindBool
	case 'n':
		d.pos += len("null")
		n.kind = kindNull
	default: // a number: its literal text, as json.Number keeps it
		start := d.pos
		for d.pos < len(d.data) && strings.IndexByte("+-.0123456789eE", d.data[d.pos]) >= 0 {
			d.pos++
		}
		n.kind, n.s = kindNumber, string(d.data[start:d.pos])
	}
	return n, nil
}

// str reads the string that starts at the current position. A string of printable ASCII
// without escapes is its own bytes; any other is decoded by encoding/json's unquoting (copied
// in jsonscan.go), so that escapes, surrogate pairs and invalid UTF-8 (replaced by U+FFFD)
// read exactly as encoding/json reads them.
func (d *decoder) str() (string, error) {
	start := d.pos
	d.pos++ // the opening quote
	plain := true
	for {
		c := d.data[d.pos]
		if c == '"' {
			break
		}
		if c == '\\' {
			plain = false
			d.pos += 2
			continue
		}
		if c >= utf8.RuneSelf {
			plain = false
		}
		d.pos++
	}
	d.pos++ // the closing quote
	if plain {
		return string(d.data[start+1 : d.pos-1]), nil
	}
	return unquoteString(d.data[start:d.pos])
}

// unquoteString decodes a quoted string with escapes or non-ASCII bytes (see str), out of
// str's line: V8 in Envoy compiles a function on its first call, and the strings of most
// configurations are plain.
//
//go:noinline
func unquoteString(quoted []byte) (string, error) {
	b, ok := unquoteBytes(quoted)
	if !ok {
		// The scanner accepted the string, so this cannot happen; say so rather than panic.
		return "", errors.New("a string the syntax check accepted could not be unquoted")
	}
	return string(b), nil
}

// duplicate reports key as a duplicate in the object at the current path (out of value's
// line: V8 in Envoy compiles a function on its first call).
//
//go:noinline
func (d *decoder) duplicate(key string) {
	d.dup(d.path(), key)
}

// indexMembers returns an index of the keys of object n (see indexAfter).
//
//go:noinline
func indexMembers(n *node) map[string]struct{} {
	index := make(map[string]struct{}, 2*indexAfter)
	for _, m := range n.members {
		index[m.key] = struct{}{}
	}
	return index
}

// addIndexed adds the member key: val to object n, of indexAfter members or more, whose keys
// index holds (nil: not made yet, then made here), or reports the key as a duplicate. It
// returns the index.
//
//go:noinline
func (d *decoder) addIndexed(n *node, index map[string]struct{}, key string, val *node) map[string]struct{} {
	if index == nil {
		index = indexMembers(n)
	}
	if _, seen := index[key]; seen {
		d.dup(d.path(), key)
		return index
	}
	n.members = append(n.members, member{key: key, val: val})
	index[key] = struct{}{}
	return index
}

// lookup returns the member named key, or nil. It is kept out of line: the parser and value
// ask for members at many places, and V8 in Envoy compiles whatever is inlined at each of
// them in every VM's configure.
//
//go:noinline
func (n *node) lookup(key string) *node {
	for i := range n.members {
		if n.members[i].key == key {
			return n.members[i].val
		}
	}
	return nil
}

// describe renders a value for "want X, got Y" messages: scalars literally (long strings
// shortened), containers by their type.
func (n *node) describe() string {
	switch n.kind {
	case kindNull:
		return "null"
	case kindBool:
		return strconv.FormatBool(n.b)
	case kindNumber:
		return shorten(n.s)
	case kindString:
		return quote(n.s)
	case kindObject:
		return "an object"
	default:
		return "an array"
	}
}

// quote renders a user-supplied string for an error message: Go-quoted, so control
// characters and invalid UTF-8 are visible, and shortened so that a 1 MiB value does not
// make a 1 MiB log line.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		cut := max
		// Cut on a rune boundary so the quoted prefix shows characters, not broken bytes.
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// joinKey appends an object key to a path. Keys that are not plain identifiers are written
// in brackets and quoted, so that a path is never ambiguous.
func joinKey(path, key string) string {
	if len(key) > 64 || !isPlainKey(key) {
		return joinQuotedKey(path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// joinIndex appends an array index to a path. The index is written with strconv.AppendInt
// into a buffer on the stack, not with strconv.Itoa: the filter runs AppendInt while it
// configures anyway, and V8 in Envoy compiles each function on its first call, so Itoa's
// own code would be compiled in every VM's configure for the paths alone.
// joinQuotedKey is joinKey for a key that is not a plain identifier, out of its line: V8 in
// Envoy compiles a function on its first call, and every field name is plain.
//
//go:noinline
func joinQuotedKey(path, key string) string {
	// quote shortens a key longer than 64 bytes, so that a path (and the error message it is
	// part of) stays short whatever key a document holds. No field name is that long, so the
	// shortened form only ever names a key that is reported as unknown.
	return path + "[" + quote(key) + "]"
}

func joinIndex(path string, i int) string {
	var buf [20]byte
	return path + "[" + string(strconv.AppendInt(buf[:0], int64(i), 10)) + "]"
}

func isPlainKey(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '$') {
			return false
		}
	}
	return true
}
