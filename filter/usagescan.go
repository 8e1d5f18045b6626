package filter

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// usageScanner finds the values of a usage cost's JSON pointers in a response body as it
// streams, one chunk at a time, without keeping the body: its state is a fixed-size struct, so
// a stream costs the same whatever its length.
//
// The body is either JSON (one document, or several one after another) or a
// text/event-stream, whose events' "data:" lines are each event's JSON document (an event's
// lines joined by newlines, as the SSE specification says). The last value found at each
// pointer wins; the values of several pointers are summed, and the usage is reported only when
// every pointer has one. A value that is not a non-negative integer makes its pointer invalid
// until a later document gives it a number; an integer too large for an int64 reads as
// config.DecimalCeiling, above any max. A document that is not JSON ("data: [DONE]") is
// skipped up to its end.
//
// The tokenizer follows only the containers some pointer goes into. A value no pointer reaches
// (an LLM stream's generated text) is skipped: only its strings and brackets are read, to find
// its end, and its syntax is not checked. String contents are skipped with bytes.IndexByte (in
// Wasm the runtime's memchr); keys without an escape are compared with the pointers' tokens
// whole. In an event stream, an event whose bytes cannot hold a pointer's key is skipped whole
// (see write).
type usageScanner struct {
	ptrs [][]string // the pointers' reference tokens (config.UsageSpec.Pointers)
	sse  bool       // the body is a text/event-stream

	// Per pointer: its last value, and whether it was found (valid, invalid or not yet).
	vals  [maxUsagePointers]int64
	found [maxUsagePointers]uint8

	// The JSON tokenizer.
	depth   int    // containers followed: 0 at the top level
	arrays  uint32 // bit d set: the container at depth d+1 is an array
	st      scanState
	mask    [maxScanDepth + 1]uint8 // pointers whose tokens match the path to depth d
	deeper  [maxScanDepth + 1]uint8 // pointers with more than d tokens
	index   [maxScanDepth + 1]int64 // the current element's index in an array at depth d
	skip    int                     // brackets open in the value being skipped
	keyMask uint8                   // pointers whose token still matches the key being read
	keyLen  int                     // bytes of the key read so far
	esc     int                     // inside a string: 0, or the bytes of an escape read so far
	ucode   rune                    // a \u escape's code point so far
	inKey   bool                    // the string being read is an object key
	num     int64                   // the number being read, while it is a whole number
	numOK   bool                    // it still is one
	lit     string                  // the letters of true, false or null left to read

	// The event-stream lexer. evidence[i] is the index of pointer i's token that an event's
	// data must hold as a key for the pointer to be found there (see mayHold); skipEvents is
	// set when every pointer has one.
	evidence   [maxUsagePointers]uint8
	skipEvents bool
	lineStart  bool // at the start of a line
	field      [5]byte
	fieldLen   int  // bytes of the line's field name read, until ':'; -1: skip the line
	inData     bool // the line is a "data" line: its value goes to the tokenizer
	skipSpace  bool // one space after "data:" is dropped
	dataLines  int  // data lines in the current event
	lastCR     bool // the previous byte was '\r' (a "\r\n" is one line end)
	broken     bool // the current document is not JSON: skip to its end
}

// The scanner's limits. A pointer has at most 16 tokens (config.parsePointer), so none goes
// into a container at depth 17.
const (
	maxUsagePointers = 8
	maxScanDepth     = 17
)

type scanState uint8

const (
	stValue    scanState = iota // expecting a value
	stAfter                     // after a value: ',' or a closing bracket
	stKey                       // expecting a key (or '}' right after '{')
	stColon                     // after a key
	stString                    // inside a string whose contents no pointer needs
	stKeyMatch                  // inside a key compared with the pointers' tokens byte by byte
	stNumber                    // inside a number
	stLiteral                   // inside true, false or null
	stSkip                      // inside a container no pointer goes into
)

// Per-pointer outcomes in found.
const (
	ptrNone    = 0
	ptrValue   = 1
	ptrInvalid = 2
)

// What the tokenizer is given between an event's data lines, and at a document's end.
var (
	lineFeed = []byte{'\n'}
	space    = []byte{' '}
)

func (s *usageScanner) reset(ptrs [][]string, sse bool) {
	*s = usageScanner{ptrs: ptrs, sse: sse, lineStart: true}
	s.skipEvents = sse
	for i, p := range ptrs {
		for d := range min(len(p), maxScanDepth) {
			s.deeper[d] |= 1 << i
		}
		// The last token that can only be a key (not empty, not an array index), and that only
		// \u and \/ escapes can write (no quote, backslash or control character).
		k := len(p) - 1
		for k >= 0 && (p[k] == "" || isIndex(p[k])) {
			k--
		}
		s.evidence[i] = uint8(max(k, 0))
		s.skipEvents = s.skipEvents && k >= 0 && !strings.ContainsFunc(p[k], func(r rune) bool { return r < ' ' || r == '"' || r == '\\' })
	}
	s.startDocument()
}

// startDocument readies the tokenizer for a new document at the top level.
func (s *usageScanner) startDocument() {
	s.depth, s.arrays, s.st, s.skip, s.broken = 0, 0, stValue, 0, false
	s.mask[0] = uint8(1<<len(s.ptrs) - 1)
}

// usage returns the sum of the pointers' last values, and whether every pointer has one: a
// body that reports only part of a sum (another API's shape) must not be charged that part.
func (s *usageScanner) usage() (int64, bool) {
	var sum int64
	for i := range s.ptrs {
		if s.found[i] != ptrValue {
			return 0, false
		}
		sum += s.vals[i] // at most 8 values of at most config.DecimalCeiling: no overflow
	}
	return sum, len(s.ptrs) > 0
}

// write scans one chunk of the body.
func (s *usageScanner) write(b []byte) {
	if !s.sse {
		s.jsonBytes(b)
		return
	}
	// The next '\n' and '\r' at or after i (len(b): none), each searched for again only once i
	// has passed it, and the end of the events already looked at for skipping: a chunk of many
	// lines is searched once.
	nl, cr, looked := -1, -1, -1
	for i := 0; i < len(b); {
		if s.skipEvents && i > looked && s.lineStart && s.dataLines == 0 && !s.lastCR {
			// The events up to the first "\n\n" in this chunk, none of whose bytes can be a
			// pointer's key, are skipped whole: after that "\n\n" the state is as before them.
			if nl < i {
				nl = indexFrom(b, i, '\n')
			}
			e := nl
			for e+1 < len(b) && b[e+1] != '\n' {
				e = indexFrom(b, e+1, '\n')
			}
			if e+1 < len(b) && !s.mayHold(b[i:e]) {
				i = e + 2
				continue
			}
			looked = e + 1
		}
		if s.inData && s.skipSpace {
			s.skipSpace = false
			if b[i] == ' ' {
				i++
				continue
			}
		}
		if s.inData || s.fieldLen < 0 {
			// The rest of a data line goes to the tokenizer in one piece; the rest of a
			// comment or of another field's line is skipped.
			if nl < i {
				nl = indexFrom(b, i, '\n')
			}
			if cr < i {
				cr = indexFrom(b, i, '\r')
			}
			end := min(nl, cr)
			if s.inData {
				s.jsonBytes(b[i:end])
			}
			if i = end; i == len(b) {
				return
			}
		}
		s.event(b[i])
		i++
	}
}

// indexFrom returns the index of the first c in b at or after i, or len(b).
func indexFrom(b []byte, i int, c byte) int {
	if k := bytes.IndexByte(b[i:], c); k >= 0 {
		return i + k
	}
	return len(b)
}

// mayHold reports whether an event's bytes b may hold a pointer's evidence token as a key:
// plainly between quotes, or with an escape that can stand for one of its characters.
func (s *usageScanner) mayHold(b []byte) bool {
	backslash := indexFrom(b, 0, '\\')
	for j := backslash; j < len(b); j = indexFrom(b, j+1, '\\') {
		if j+1 == len(b) || b[j+1] == 'u' {
			return true
		}
	}
	for i, p := range s.ptrs {
		t := p[s.evidence[i]]
		if (backslash < len(b) && strings.IndexByte(t, '/') >= 0) || quotedIn(b, t) {
			return true
		}
	}
	return false
}

// quotedIn reports whether b holds t between quotes, searching for t's first byte that is not
// a lower-case letter (rarer in text), or its last.
func quotedIn(b []byte, t string) bool {
	a := len(t) - 1
	for k := range len(t) {
		if t[k] < 'a' || t[k] > 'z' {
			a = k
			break
		}
	}
	for j := indexFrom(b, 0, t[a]); j < len(b); j = indexFrom(b, j+1, t[a]) {
		if start := j - a; start >= 1 && start+len(t) < len(b) && b[start-1] == '"' &&
			b[start+len(t)] == '"' && string(b[start:start+len(t)]) == t {
			return true
		}
	}
	return false
}

// isIndex reports whether t is an array index as JSON pointers write it.
func isIndex(t string) bool {
	n, err := strconv.Atoi(t)
	return err == nil && n >= 0 && strconv.Itoa(n) == t
}

// event lexes one byte of a text/event-stream outside a data line's value or a skipped line.
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
		s.lineStart = false
		if c == ':' {
			s.fieldLen = -1 // a comment line
			return
		}
	}
	switch {
	case s.fieldLen < 0:
	case c == ':':
		if s.fieldLen == 4 && string(s.field[:4]) == "data" {
			s.inData, s.skipSpace = true, true
			if s.dataLines > 0 {
				s.jsonBytes(lineFeed)
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
	s.jsonBytes(space)
}

// endEvent ends the current event's document (an incomplete number at its end is complete).
func (s *usageScanner) endEvent() {
	if s.dataLines > 0 {
		s.jsonBytes(space)
		s.startDocument()
	}
	s.dataLines = 0
}

// jsonBytes tokenizes b, a piece of a JSON document: skipped strings and values, and keys, a
// run at a time, the commonest structural bytes in this loop, the rest byte by byte (json).
func (s *usageScanner) jsonBytes(b []byte) {
	for i := 0; i < len(b) && !s.broken; {
		c := b[i]
		switch s.st {
		case stString:
			n, closed := s.skipString(b[i:])
			if i += n; closed {
				s.endString()
			}
			continue
		case stSkip:
			i += s.skipValue(b[i:])
			continue
		case stKey:
			if c == '"' {
				i += 1 + s.key(b[i+1:])
				continue
			}
		case stColon:
			if c == ':' {
				s.st = stValue
				i++
				continue
			}
		case stValue:
			if c == '"' {
				s.st, s.inKey, s.esc = stString, false, 0
				i++
				continue
			}
		case stAfter:
			if c == ',' && !s.inArray() && s.depth > 0 {
				s.st = stKey
				i++
				continue
			}
		}
		s.json(c)
		i++
	}
}

// skipString reads the contents of a string no pointer needs, up to its closing quote (the
// first not after an odd run of backslashes; escapes are not checked), and returns how many
// bytes it consumed and whether the string ended.
func (s *usageScanner) skipString(b []byte) (int, bool) {
	i := 0
	if s.esc != 0 {
		i, s.esc = 1, 0 // a backslash ended the last piece: this byte is escaped
	}
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			if backslashes(b[i:])%2 == 1 {
				s.esc = 1
			}
			return len(b), false
		}
		q += i
		if backslashes(b[i:q])%2 == 0 {
			return q + 1, true
		}
		i = q + 1
	}
}

// backslashes returns how many backslashes b ends with.
func backslashes(b []byte) int {
	n := 0
	for n < len(b) && b[len(b)-1-n] == '\\' {
		n++
	}
	return n
}

// endString ends a string stString read.
func (s *usageScanner) endString() {
	switch {
	case s.skip > 0:
		s.st = stSkip
	case s.inKey:
		s.st, s.mask[s.depth] = stColon, 0 // a key no pointer's token can be
	default:
		s.scalar(false)
	}
}

// skipValue reads b inside a container no pointer goes into, up to a string in it or its end,
// and returns how many bytes it consumed.
func (s *usageScanner) skipValue(b []byte) int {
	for i, c := range b {
		switch c {
		case '"':
			s.st, s.esc = stString, 0
			return i + 1
		case '{', '[':
			s.skip++
		case '}', ']':
			if s.skip--; s.skip == 0 {
				s.st = stAfter
				return i + 1
			}
		}
	}
	return len(b)
}

// key starts an object key whose bytes follow in b, and returns how many it consumed: the
// whole key, compared with the tokens at once, when it ends in b without an escape; else none.
func (s *usageScanner) key(b []byte) int {
	d := s.depth
	s.inKey, s.keyLen, s.esc = true, 0, 0
	s.keyMask = s.mask[d-1] & s.deeper[d-1]
	if s.keyMask == 0 {
		s.st = stString
		return 0
	}
	q := bytes.IndexByte(b, '"')
	if q < 0 || bytes.IndexByte(b[:q], '\\') >= 0 {
		s.st = stKeyMatch
		return 0
	}
	var m uint8
	for i, p := range s.ptrs {
		if s.keyMask&(1<<i) != 0 && p[d-1] == string(b[:q]) {
			m |= 1 << i
		}
	}
	s.st, s.mask[d] = stColon, m
	return q + 1
}

// json tokenizes one byte of a JSON document outside a skipped string or value.
func (s *usageScanner) json(c byte) {
	switch s.st {
	case stKeyMatch:
		s.keyMatchByte(c)
		return
	case stNumber:
		if c >= '0' && c <= '9' {
			// A number too large for an int64 saturates at config.DecimalCeiling, as a
			// header's value does (config.ParseDecimal): it is charged max, not missing.
			if s.num >= config.DecimalCeiling/10 {
				s.num = config.DecimalCeiling
			} else {
				s.num = s.num*10 + int64(c-'0')
			}
			return
		}
		if c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			s.numOK = false
			return
		}
		s.scalar(s.numOK)
	case stLiteral:
		if s.lit != "" {
			if c != s.lit[0] {
				s.broken = true
			}
			s.lit = s.lit[1:]
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
		if c == '}' {
			s.close(false)
		} else {
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
		// A container at a pointer's full path is no number: the pointer is invalid.
		s.atPointer(0, false)
		if d := s.depth; s.mask[d]&s.deeper[d] == 0 || d == maxScanDepth {
			s.st, s.skip = stSkip, 1
			return
		}
		s.open(c == '[')
	case c == '"':
		s.st, s.inKey, s.esc = stString, false, 0
	case c == '-' || (c >= '0' && c <= '9'):
		s.st, s.num, s.numOK = stNumber, 0, c != '-'
		if c != '-' {
			s.num = int64(c - '0')
		}
	case c == 't' || c == 'f' || c == 'n': // the letters of true, false or null left to read
		s.st, s.lit = stLiteral, [...]string{"rue", "alse", "ull"}[strings.IndexByte("tfn", c)]
	case c == ']' && s.inArray() && s.index[s.depth] == 0:
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
		s.index[s.depth]++
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

// open enters an object or an array that some pointer goes into.
func (s *usageScanner) open(array bool) {
	s.depth++
	if array {
		s.arrays |= 1 << (s.depth - 1)
		s.index[s.depth] = 0
		s.elementMask()
		s.st = stValue
		return
	}
	s.arrays &^= 1 << (s.depth - 1)
	s.st = stKey
}

// elementMask sets the mask of the array element at the current index.
func (s *usageScanner) elementMask() {
	d := s.depth
	var buf [20]byte
	index := strconv.AppendInt(buf[:0], s.index[d], 10)
	var m uint8
	for i, p := range s.ptrs {
		if s.mask[d-1]&s.deeper[d-1]&(1<<i) != 0 && p[d-1] == string(index) {
			m |= 1 << i
		}
	}
	s.mask[d] = m
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

// scalar ends a number (ok: a whole non-negative number, s.num) or a literal; the byte that
// ended it is the caller's to read.
func (s *usageScanner) scalar(ok bool) {
	s.atPointer(s.num, ok)
	s.st = stAfter
}

// atPointer records a value at the current path for every pointer that ends there.
func (s *usageScanner) atPointer(v int64, ok bool) {
	d := s.depth
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

// keyMatchByte reads one byte of a key that holds an escape or does not end in the piece it
// starts in, comparing its bytes (escapes decoded) with the pointers' tokens as they come.
func (s *usageScanner) keyMatchByte(c byte) {
	if s.esc > 0 {
		s.escape(c)
		return
	}
	switch c {
	case '\\':
		s.esc = 1
	case '"':
		s.endKey()
	default:
		s.keyByte(c)
	}
}

// escape reads one byte of an escape sequence in a key.
func (s *usageScanner) escape(c byte) {
	if s.esc == 1 {
		s.esc = 0
		switch k := strings.IndexByte(`"\/bfnrt`, c); {
		case k >= 0:
			s.keyByte("\"\\/\b\f\n\r\t"[k])
		case c == 'u':
			s.esc, s.ucode = 2, 0
		default:
			s.broken = true
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
	var buf [4]byte
	// A lone surrogate becomes U+FFFD, which no pointer token written as text holds.
	for _, b := range utf8.AppendRune(buf[:0], s.ucode) {
		s.keyByte(b)
	}
}

// keyByte compares one byte of a key with the pointers' tokens at its depth.
func (s *usageScanner) keyByte(c byte) {
	d := s.depth
	for i, p := range s.ptrs {
		if s.keyMask&(1<<i) != 0 && (s.keyLen >= len(p[d-1]) || p[d-1][s.keyLen] != c) {
			s.keyMask &^= 1 << i
		}
	}
	s.keyLen++
}

// endKey ends a key: the path's mask at this depth is the pointers whose token is the key.
func (s *usageScanner) endKey() {
	d := s.depth
	m := s.keyMask
	for i, p := range s.ptrs {
		if m&(1<<i) != 0 && len(p[d-1]) != s.keyLen {
			m &^= 1 << i
		}
	}
	s.st, s.mask[d] = stColon, m
}
