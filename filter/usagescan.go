package filter

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"
)

// usageScanner finds the values of a usage cost's JSON pointers in a response body as it
// streams, one chunk at a time, without keeping the body: the state it keeps is a fixed-size
// struct (a nesting stack of bits, a match mask per level, the digits of one number), so a
// stream costs the same whatever its length, and a chunk is scanned once, byte by byte.
//
// The body is either JSON (one document, or several one after another) or a
// text/event-stream, whose events' "data:" lines are each event's JSON document (the lines
// of one event joined by newlines, as the SSE specification says). Across documents and
// events, the last value found at each pointer wins; the values of several pointers are
// summed, and the usage is reported only when every pointer has a value. A value at a pointer that is not a non-negative integer (null, a string, a
// fraction, an object) makes the pointer invalid until a later document gives it a number.
// A document that is not JSON ("data: [DONE]") is skipped up to its end.
type usageScanner struct {
	ptrs [][]string // the pointers' reference tokens (config.UsageSpec.Pointers)
	sse  bool       // the body is a text/event-stream

	// Per pointer: its last value, and whether it was found (valid, invalid or not yet).
	vals  [maxUsagePointers]int64
	found [maxUsagePointers]uint8

	// The JSON tokenizer.
	depth   int    // nesting depth: 0 at the top level
	arrays  uint64 // bit d set: the container at depth d+1 is an array
	st      scanState
	mask    [maxScanDepth + 1]uint8 // pointers whose tokens match the path to depth d
	index   [maxScanDepth + 1]int64 // the current element's index in an array at depth d
	keyMask uint8                   // pointers whose token still matches the key being read
	keyLen  int                     // bytes of the key read so far
	esc     int                     // inside a string: 0, or the bytes of an escape read so far
	ucode   rune                    // a \u escape's code point so far
	inKey   bool                    // the string being read is an object key
	num     int64                   // the number being read, while it is a whole number
	numOK   bool                    // it still is one
	numLen  int
	litLeft int // letters of true, false or null left to read

	// The event-stream lexer.
	lineStart bool // at the start of a line
	field     [5]byte
	fieldLen  int  // bytes of the line's field name read, until ':'
	inData    bool // the line is a "data" line: its value goes to the tokenizer
	skipSpace bool // one space after "data:" is dropped
	dataLines int  // data lines in the current event
	lastCR    bool // the previous byte was '\r' (a "\r\n" is one line end)
	broken    bool // the current document is not JSON: skip to its end
}

// The limits of the scanner: pointers and the depth whose paths it follows (deeper levels
// are counted, not followed), and the deepest nesting it reads at all; a document nested
// deeper is skipped.
const (
	maxUsagePointers = 8
	maxScanDepth     = 17
	maxNesting       = 64
)

type scanState uint8

const (
	stValue   scanState = iota // expecting a value
	stAfter                    // after a value: ',' or a closing bracket
	stKey                      // expecting a key (or '}' right after '{')
	stColon                    // after a key
	stString                   // inside a string
	stNumber                   // inside a number
	stLiteral                  // inside true, false or null
)

// Per-pointer outcomes in found.
const (
	ptrNone    = 0
	ptrValue   = 1
	ptrInvalid = 2
)

func (s *usageScanner) reset(ptrs [][]string, sse bool) {
	*s = usageScanner{ptrs: ptrs, sse: sse, lineStart: true}
	s.startDocument()
}

// startDocument readies the tokenizer for a new document at the top level.
func (s *usageScanner) startDocument() {
	s.depth, s.arrays, s.st, s.broken = 0, 0, stValue, false
	s.mask[0] = uint8(1<<len(s.ptrs) - 1)
}

// usage returns the sum of the pointers' last values, and whether it is a reported usage:
// every pointer has a value. A body that reports only part of a sum (another API's shape)
// must not be charged that part.
func (s *usageScanner) usage() (int64, bool) {
	var sum int64
	for i := range s.ptrs {
		if s.found[i] != ptrValue {
			return 0, false
		}
		sum += s.vals[i] // at most 8 values of at most 18 digits: no overflow
	}
	return sum, len(s.ptrs) > 0
}

// write scans one chunk of the body.
func (s *usageScanner) write(b []byte) {
	if !s.sse {
		s.jsonBytes(b, &stopJSON)
		return
	}
	for i := 0; i < len(b); i++ {
		if s.inData && !s.skipSpace {
			// The rest of the data line goes to the tokenizer in one piece.
			if i += s.jsonBytes(b[i:], &stopSSE); i == len(b) {
				return
			}
		}
		s.event(b[i])
	}
}

// The bytes that end a run of string contents the tokenizer skips: a quote or a backslash,
// and in an event stream a line end.
var (
	stopJSON = [256]bool{'"': true, '\\': true}
	stopSSE  = [256]bool{'"': true, '\\': true, '\n': true, '\r': true}
)

// skipRun returns the length of b's leading 8-byte words that hold no quote, backslash and,
// with lines, no line end: the tokenizer skips them a word at a time, which in a Wasm VM is
// several times faster than a byte at a time.
func skipRun(b []byte, lines bool) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^('"'*ones), x^('\\'*ones)
		found := (q-ones)&^q | (bs-ones)&^bs
		if lines {
			nl, cr := x^('\n'*ones), x^('\r'*ones)
			found |= (nl-ones)&^nl | (cr-ones)&^cr
		}
		if found&highs != 0 {
			break
		}
	}
	return i
}

// jsonBytes tokenizes b, a piece of a JSON document, up to a line end when stop says so
// (an event stream's data line ends there), and returns how many bytes it consumed. The
// contents of strings that no pointer needs (values, and keys that match no pointer's token)
// are skipped to their next stop byte in one tight loop: in an LLM's stream nearly every byte
// is generated text inside a string, and a call per byte costs ten times as much.
func (s *usageScanner) jsonBytes(b []byte, stop *[256]bool) int {
	i := 0
	for i < len(b) {
		if s.st == stString && s.esc == 0 && (!s.inKey || s.keyMask == 0) {
			i += skipRun(b[i:], stop == &stopSSE)
			for i < len(b) && !stop[b[i]] {
				i++
			}
			if i == len(b) {
				break
			}
		}
		c := b[i]
		if c == '\n' || c == '\r' {
			if stop['\n'] {
				return i
			}
		}
		s.json(c)
		i++
	}
	return i
}

// event lexes one byte of a text/event-stream.
func (s *usageScanner) event(c byte) {
	if c == '\n' && s.lastCR {
		s.lastCR = false
		return
	}
	s.lastCR = c == '\r'
	if c == '\n' || c == '\r' {
		if s.lineStart {
			s.endEvent() // a blank line dispatches the event
		}
		s.lineStart, s.inData, s.fieldLen = true, false, 0
		return
	}
	if s.lineStart {
		s.lineStart, s.fieldLen, s.inData = false, 0, false
		if s.fieldLen == 0 && c == ':' {
			s.fieldLen = -1 // a comment line
			return
		}
	}
	switch {
	case s.inData:
		if s.skipSpace {
			s.skipSpace = false
			if c == ' ' {
				return
			}
		}
		s.json(c)
	case s.fieldLen < 0:
		// the rest of a comment or of another field's line
	case c == ':':
		if s.fieldLen == 4 && string(s.field[:4]) == "data" {
			s.inData, s.skipSpace = true, true
			if s.dataLines > 0 {
				s.json('\n')
			}
			s.dataLines++
		} else {
			s.fieldLen = -1
		}
	case s.fieldLen < len(s.field):
		s.field[s.fieldLen] = c
		s.fieldLen++
	default:
		s.fieldLen = -1
	}
}

// end ends the body: a number at its very end is complete.
func (s *usageScanner) end() {
	if s.sse {
		s.endEvent()
		return
	}
	s.json(' ')
}

// endEvent ends the current event's document (an incomplete number at its end is complete).
func (s *usageScanner) endEvent() {
	if s.dataLines > 0 {
		s.json(' ')
		s.startDocument()
	}
	s.dataLines = 0
}

// json tokenizes one byte of a JSON document.
func (s *usageScanner) json(c byte) {
	if s.broken {
		return
	}
	switch s.st {
	case stString:
		s.stringByte(c)
		return
	case stNumber:
		if c >= '0' && c <= '9' {
			if s.numOK && s.numLen < 18 {
				s.num = s.num*10 + int64(c-'0')
				s.numLen++
			} else {
				s.numOK = false
			}
			return
		}
		if c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			s.numOK = false
			return
		}
		s.scalar(s.numOK)
	case stLiteral:
		if c >= 'a' && c <= 'z' {
			if s.litLeft--; s.litLeft < 0 {
				s.broken = true
			}
			return
		}
		if s.litLeft != 0 {
			s.broken = true
			return
		}
		s.scalar(false)
	}
	if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
		return
	}
	switch s.st {
	case stValue:
		s.value(c)
	case stAfter:
		s.after(c)
	case stKey:
		switch c {
		case '"':
			s.st, s.inKey, s.keyLen, s.esc, s.keyMask = stString, true, 0, 0, 0
			if s.depth <= maxScanDepth {
				s.keyMask = s.mask[s.depth-1]
			}
		case '}':
			s.close(false)
		default:
			s.broken = true
		}
	case stColon:
		if c != ':' {
			s.broken = true
			return
		}
		s.st = stValue
	}
}

// value starts a value with its first byte c.
func (s *usageScanner) value(c byte) {
	switch {
	case c == '{' || c == '[':
		s.open(c == '[')
	case c == '"':
		s.st, s.inKey, s.esc = stString, false, 0
	case c == '-' || (c >= '0' && c <= '9'):
		s.st, s.num, s.numOK, s.numLen = stNumber, 0, c != '-', 0
		if c != '-' {
			s.num, s.numLen = int64(c-'0'), 1
		}
	case c == 't' || c == 'n':
		s.st, s.litLeft = stLiteral, 3
	case c == 'f':
		s.st, s.litLeft = stLiteral, 4
	case c == ']' && s.depth > 0 && s.inArray() && s.index[min(s.depth, maxScanDepth)] == 0:
		s.close(true) // an empty array
	default:
		s.broken = true
	}
}

// after reads the byte after a value: a separator, or the end of its container.
func (s *usageScanner) after(c byte) {
	switch {
	case s.depth == 0:
		s.startDocument() // another document follows
		s.value(c)
	case c == ',' && s.inArray():
		d := min(s.depth, maxScanDepth)
		s.index[d]++
		s.elementMask()
		s.st = stValue
	case c == ',':
		s.st = stKey
	case c == ']' && s.inArray(), c == '}' && !s.inArray():
		s.close(s.inArray())
	default:
		s.broken = true
	}
}

func (s *usageScanner) inArray() bool { return s.depth > 0 && s.arrays&(1<<(s.depth-1)) != 0 }

// open enters an object or an array.
func (s *usageScanner) open(array bool) {
	// A container at a pointer's full path is no number: the pointer is invalid.
	s.atPointer(0, false)
	if s.depth >= maxNesting {
		s.broken = true
		return
	}
	s.depth++
	if array {
		s.arrays |= 1 << (s.depth - 1)
	} else {
		s.arrays &^= 1 << (s.depth - 1)
	}
	if array {
		s.index[min(s.depth, maxScanDepth)] = 0
		s.elementMask()
		s.st = stValue
		return
	}
	s.st = stKey
}

// elementMask sets the mask of the array element at the current index.
func (s *usageScanner) elementMask() {
	d := s.depth
	if d > maxScanDepth {
		return
	}
	parent := s.mask[d-1]
	var m uint8
	for i, p := range s.ptrs {
		if parent&(1<<i) != 0 && len(p) >= d && p[d-1] == itoa(s.index[d]) {
			m |= 1 << i
		}
	}
	s.mask[d] = m
}

// itoa formats a small array index; indexes above 9 are rare enough to allocate.
func itoa(n int64) string {
	if n >= 0 && n < 10 {
		return "0123456789"[n : n+1]
	}
	return strconv.FormatInt(n, 10)
}

// close leaves the current container.
func (s *usageScanner) close(array bool) {
	if s.inArray() != array {
		s.broken = true
		return
	}
	s.depth--
	s.st = stAfter
}

// scalar ends a number (ok: a whole non-negative number, s.num) or a literal, then reads
// nothing more: the byte that ended it is read by the caller.
func (s *usageScanner) scalar(ok bool) {
	s.atPointer(s.num, ok)
	s.st = stAfter
}

// atPointer records a value at the current path for every pointer that ends there.
func (s *usageScanner) atPointer(v int64, ok bool) {
	d := s.depth
	if d > maxScanDepth {
		return
	}
	m := s.mask[d]
	for i, p := range s.ptrs {
		if m&(1<<i) != 0 && len(p) == d {
			if ok {
				s.vals[i], s.found[i] = v, ptrValue
			} else {
				s.found[i] = ptrInvalid
			}
		}
	}
}

// stringByte reads one byte inside a string; a key's bytes are compared with the pointers'
// tokens at its depth as they come.
func (s *usageScanner) stringByte(c byte) {
	if s.esc > 0 {
		s.escape(c)
		return
	}
	switch c {
	case '\\':
		s.esc = 1
	case '"':
		if s.inKey {
			s.endKey()
			return
		}
		s.scalar(false)
	default:
		if s.inKey {
			s.keyByte(c)
		}
	}
}

// escape reads one byte of an escape sequence in a string.
func (s *usageScanner) escape(c byte) {
	if s.esc == 1 {
		s.esc = 0
		var d byte
		switch c {
		case '"', '\\', '/':
			d = c
		case 'b':
			d = '\b'
		case 'f':
			d = '\f'
		case 'n':
			d = '\n'
		case 'r':
			d = '\r'
		case 't':
			d = '\t'
		case 'u':
			s.esc, s.ucode = 2, 0
			return
		default:
			s.broken = true
			return
		}
		if s.inKey {
			s.keyByte(d)
		}
		return
	}
	var h rune
	switch {
	case c >= '0' && c <= '9':
		h = rune(c - '0')
	case c >= 'a' && c <= 'f':
		h = rune(c-'a') + 10
	case c >= 'A' && c <= 'F':
		h = rune(c-'A') + 10
	default:
		s.broken = true
		return
	}
	s.ucode = s.ucode<<4 | h
	if s.esc++; s.esc < 6 {
		return
	}
	s.esc = 0
	if !s.inKey {
		return
	}
	var buf [4]byte
	// A lone surrogate becomes U+FFFD, which no pointer token written as text holds.
	for _, b := range utf8.AppendRune(buf[:0], s.ucode) {
		s.keyByte(b)
	}
}

// keyByte compares one byte of a key with the pointers' tokens at its depth.
func (s *usageScanner) keyByte(c byte) {
	if s.keyMask == 0 {
		return
	}
	d := s.depth
	for i, p := range s.ptrs {
		if s.keyMask&(1<<i) != 0 && (len(p) < d || s.keyLen >= len(p[d-1]) || p[d-1][s.keyLen] != c) {
			s.keyMask &^= 1 << i
		}
	}
	s.keyLen++
}

// endKey ends a key: the path's mask at this depth is the pointers whose token is the key.
func (s *usageScanner) endKey() {
	d := s.depth
	s.st = stColon
	if d > maxScanDepth {
		return
	}
	m := s.keyMask
	for i, p := range s.ptrs {
		if m&(1<<i) != 0 && (len(p) < d || len(p[d-1]) != s.keyLen) {
			m &^= 1 << i
		}
	}
	s.mask[d] = m
}
