package config

import (
	"bytes"
	"errors"
	"io"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// The config is decoded into this small tree, rather than straight into structs, so that the
// parser can name the JSON path of every problem, report every duplicate key (a decoder that
// keeps the last of two would let `"limit": 10, "limit": 100000` slip by) and report problems
// in document order. The tokens come from jsontext (github.com/go-json-experiment/json, Go's
// encoding/json/jsontext without GOEXPERIMENT=jsonv2), which links neither reflect nor fmt.

type kind uint8 // the JSON type of a node

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
// through dup with the path of the duplicate (here, so that each is reported with the
// document's other problems), and the first occurrence is kept. Invalid UTF-8 is replaced by
// U+FFFD, as encoding/json reads it. For a document that is not one JSON value the error's
// Path is where the problem was met (the value being read, or the object whose next member
// was expected), and its Msg says what and, but for the nesting bound, at which byte.
func decodeTree(data []byte, dup func(path, key string)) (*node, *Error) {
	d := decoder{
		data: data,
		dec: jsontext.NewDecoder(bytes.NewBuffer(data),
			jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)),
		dup: dup,
	}
	n, err := d.value(0)
	if err != nil {
		return nil, d.fail(err)
	}
	// The decoder reads a stream of values; the configuration is one, so anything but white
	// space after it is refused.
	end := int(d.dec.InputOffset())
	for _, c := range data[end:] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return nil, trailingData(data, end)
		}
	}
	return n, nil
}

// trailingData is decodeTree's error for data after the top-level value, which ends at byte
// end.
func trailingData(data []byte, end int) *Error {
	return &Error{Msg: "invalid JSON: unexpected data after the top-level value, which ends at " + at(data, int64(end))}
}

// decoder builds the tree from jsontext's tokens. It keeps the path to the current value as
// a stack of segments and renders it only for a problem: every value's path string built up
// front would repeat a long key for every element below it (gigabytes for a 1 MiB document).
type decoder struct {
	data []byte
	dec  *jsontext.Decoder
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

// fail turns an error of value into decodeTree's, at the current path: the byte offset and
// what is wrong, without jsontext's JSON Pointer and prefix.
func (d *decoder) fail(err error) *Error {
	msg := "invalid JSON: " + err.Error()
	if se, ok := errors.AsType[*jsontext.SyntacticError](err); ok && se.Err != nil {
		what := se.Err.Error()
		if se.Err == io.ErrUnexpectedEOF {
			what = "unexpected end of input"
		}
		msg = "invalid JSON at " + at(d.data, se.ByteOffset) + ": " + what
	} else if err == io.EOF || err == io.ErrUnexpectedEOF {
		msg = "invalid JSON: unexpected end of input"
	}
	return &Error{Path: d.path(), Msg: msg}
}

// indexAfter is the member count from which an object indexes its keys in a map, which keeps
// duplicate detection linear (a scan per key made an object of 80,000 keys take seconds).
// Below it a scan is cheaper, and every object of a valid config is that small.
const indexAfter = 16

func (d *decoder) value(depth int) (*node, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	tok, err := d.dec.ReadToken()
	if err != nil {
		return nil, err
	}
	n := new(node) // one allocation site for every kind of value: less code to compile
	switch tok.Kind() {
	case '{':
		n.kind = kindObject
		var index map[string]struct{}
		// PeekKind is 0 at an error, which the next ReadToken returns.
		for d.dec.PeekKind() != '}' {
			name, err := d.dec.ReadToken()
			if err != nil {
				return nil, err
			}
			key := name.String()
			d.segs = append(d.segs, segment{key: key})
			val, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if len(n.members) >= indexAfter {
				index = d.addIndexed(n, index, key, val)
			} else if n.lookup(key) != nil {
				d.duplicate(key)
			} else {
				n.members = append(n.members, member{key: key, val: val})
			}
			d.segs = d.segs[:len(d.segs)-1]
		}
	case '[':
		n.kind = kindArray
		for d.dec.PeekKind() != ']' {
			d.segs = append(d.segs, segment{index: len(n.elems), isIndex: true})
			val, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			d.segs = d.segs[:len(d.segs)-1]
			n.elems = append(n.elems, val)
		}
	case '"':
		n.kind, n.s = kindString, tok.String()
		return n, nil
	case 't':
		n.kind, n.b = kindBool, true
		return n, nil
	case 'f':
		n.kind = kindBool
		return n, nil
	case 'n':
		n.kind = kindNull
		return n, nil
	default: // a number: its literal text, as json.Number keeps it
		n.kind, n.s = kindNumber, tok.String()
		return n, nil
	}
	// The closing '}' or ']' that PeekKind saw.
	if _, err := d.dec.ReadToken(); err != nil {
		return nil, err
	}
	return n, nil
}

// duplicate reports key as a duplicate in the object at the current path.
func (d *decoder) duplicate(key string) {
	d.dup(d.path(), key)
}

// indexMembers returns an index of the keys of object n.
func indexMembers(n *node) map[string]struct{} {
	index := make(map[string]struct{}, 2*indexAfter)
	for _, m := range n.members {
		index[m.key] = struct{}{}
	}
	return index
}

// addIndexed adds the member key: val to object n, of indexAfter members or more, whose keys
// index holds (nil: not made yet), or reports the key as a duplicate. It returns the index.
func (d *decoder) addIndexed(n *node, index map[string]struct{}, key string, val *node) map[string]struct{} {
	if index == nil {
		index = indexMembers(n)
	}
	if _, seen := index[key]; seen {
		d.duplicate(key)
		return index
	}
	n.members = append(n.members, member{key: key, val: val})
	index[key] = struct{}{}
	return index
}

// lookup returns the member named key, or nil.
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

// joinQuotedKey is joinKey for a key that is not a plain identifier, which no field name is;
// quote shortens a long key, so that a path stays short.
func joinQuotedKey(path, key string) string {
	return path + "[" + quote(key) + "]"
}

// joinIndex appends an array index to a path, with strconv.AppendInt, which configure runs
// anyway, rather than strconv.Itoa, whose code V8 would compile for the paths alone.
func joinIndex(path string, i int) string {
	var buf [20]byte
	return path + "[" + string(strconv.AppendInt(buf[:0], int64(i), 10)) + "]"
}

func isPlainKey(s string) bool { return onlyChars(s, "_-$") }
