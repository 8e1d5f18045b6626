package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
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
func decodeTree(data []byte, dup func(path, key string)) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	d := decoder{dec: dec, dup: dup}
	n, err := d.value(0)
	if err != nil {
		return nil, jsonError(err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("invalid JSON: unexpected data after the top-level value, which ends at byte %d", end)
	}
	return n, nil
}

// decoder walks the token stream. It keeps the path to the current value as a stack of
// segments and renders it only when a duplicate key is reported: building every value's
// path string up front would cost, for a value under a long key, the length of that key
// again for every element below it, which a 1 MiB document can turn into gigabytes.
type decoder struct {
	dec  *json.Decoder
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

// jsonError makes encoding/json's errors say where the problem is.
func jsonError(err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("invalid JSON at byte %d: %s", se.Offset, se.Error())
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return errors.New("invalid JSON: unexpected end of input")
	case err == errTooDeep:
		return fmt.Errorf("invalid JSON: %w", err)
	default:
		return fmt.Errorf("invalid JSON: %s", err.Error())
	}
}

func (d *decoder) value(depth int) (*node, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	tok, err := d.dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: kindNull}, nil
	case bool:
		return &node{kind: kindBool, b: t}, nil
	case json.Number:
		return &node{kind: kindNumber, s: string(t)}, nil
	case string:
		return &node{kind: kindString, s: t}, nil
	case json.Delim:
		switch t {
		case '{':
			n := &node{kind: kindObject}
			var index map[string]struct{}
			for d.dec.More() {
				kt, err := d.dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is not a string")
				}
				d.segs = append(d.segs, segment{key: key})
				val, err := d.value(depth + 1)
				if err != nil {
					return nil, err
				}
				var seen bool
				if index != nil {
					_, seen = index[key]
				} else {
					seen = n.lookup(key) != nil
				}
				if seen {
					d.dup(d.path(), key)
				} else {
					n.members = append(n.members, member{key: key, val: val})
					if index != nil {
						index[key] = struct{}{}
					} else if len(n.members) == indexAfter {
						index = make(map[string]struct{}, 2*indexAfter)
						for _, m := range n.members {
							index[m.key] = struct{}{}
						}
					}
				}
				d.segs = d.segs[:len(d.segs)-1]
			}
			if _, err := d.dec.Token(); err != nil { // the closing '}'
				return nil, err
			}
			return n, nil
		case '[':
			n := &node{kind: kindArray}
			for d.dec.More() {
				d.segs = append(d.segs, segment{index: len(n.elems), isIndex: true})
				val, err := d.value(depth + 1)
				if err != nil {
					return nil, err
				}
				d.segs = d.segs[:len(d.segs)-1]
				n.elems = append(n.elems, val)
			}
			if _, err := d.dec.Token(); err != nil { // the closing ']'
				return nil, err
			}
			return n, nil
		}
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
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
		// quote shortens a key longer than 64 bytes, so that a path (and the error message
		// it is part of) stays short whatever key a document holds. No field name is that
		// long, so the shortened form only ever names a key that is reported as unknown.
		return path + "[" + quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func joinIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
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
