package envoycheck

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// The filter's parser reports a problem in its configuration by the JSON path of the bad field
// ("rules[2].window: ...") or, for a syntax error, by a byte of the JSON text ("invalid JSON at
// byte 36 (line 3, column 22): ..."). In envoy.yaml that JSON is a string embedded in the
// YAML (configuration.value), whose bytes, lines and columns are not the file's. This file
// finds the string in the YAML and turns either kind of position into the file's line and
// column, as an editor shows them. It works on the messages, not on the parser's error types,
// so that it does not depend on which JSON decoder the parser uses: it needs only "byte N" in
// a syntax error and the path before the first ": " of any other error.

// yamlSource is a bootstrap's YAML text with its parsed node tree.
type yamlSource struct {
	lines [][]byte // the text's lines, without their line breaks
	root  yaml.Node
}

// parseSource parses data for positions; nil when it is not YAML (the bootstrap's own parser
// has said so already).
func parseSource(data []byte) *yamlSource {
	s := &yamlSource{lines: bytes.Split(data, []byte("\n"))}
	if err := yaml.Unmarshal(data, &s.root); err != nil {
		return nil
	}
	for i, l := range s.lines {
		s.lines[i] = bytes.TrimSuffix(l, []byte("\r"))
	}
	return s
}

// embedded is where a plugin configuration's JSON text is in the YAML: the scalar that holds
// it, and how its bytes map to the file's lines and columns.
type embedded struct {
	src  *yamlSource
	node *yaml.Node
	// indent is the column (0-based, in bytes) at which a literal block's lines start; -1
	// when the value's bytes do not map one to one onto the file's (a folded block, a quoted
	// string with escapes or over several lines).
	indent int
	// firstLine is the 0-based line of the file that holds the value's first byte (exact
	// mappings only), and firstCol the column of that byte on it.
	firstLine, firstCol int
}

// find returns the scalar of the YAML whose value is exactly text (the plugin configuration as
// the plugin receives it), or nil.
func (s *yamlSource) find(text []byte) *embedded {
	if s == nil || len(text) == 0 {
		return nil
	}
	var hit *yaml.Node
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if hit != nil {
			return
		}
		if n.Kind == yaml.ScalarNode && n.Value == string(text) {
			hit = n
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&s.root)
	if hit == nil {
		return nil
	}
	e := &embedded{src: s, node: hit, indent: -1}
	switch {
	case hit.Style&yaml.LiteralStyle != 0:
		// The content starts on the line after the indicator ("|"), at the block's
		// indentation, which its first non-blank line shows; each line of the value is one
		// line of the file.
		for l := hit.Line; l < len(s.lines); l++ { // hit.Line is 1-based: s.lines[hit.Line] is the next line
			line := s.lines[l]
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			e.indent = len(line) - len(bytes.TrimLeft(line, " "))
			e.firstLine = hit.Line
			e.firstCol = e.indent
			break
		}
	case hit.Style&(yaml.FoldedStyle) == 0 && !strings.Contains(hit.Value, "\n"):
		// A plain or quoted scalar on one line: exact when the file holds the value as it is
		// after the opening quote, if any.
		line, col := hit.Line-1, hit.Column-1
		if hit.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			col++
		}
		if line < len(s.lines) && col <= len(s.lines[line]) && bytes.HasPrefix(s.lines[line][col:], text) {
			e.firstLine, e.firstCol, e.indent = line, col, col
		}
	}
	return e
}

// wholeFile is the embedding of a configuration that is a file of its own: its bytes are the
// file's.
func wholeFile(data []byte) *embedded {
	lines := bytes.Split(data, []byte("\n"))
	for i, l := range lines {
		lines[i] = bytes.TrimSuffix(l, []byte("\r"))
	}
	return &embedded{src: &yamlSource{lines: lines}, node: &yaml.Node{Value: string(data), Line: 1, Column: 1}}
}

// position returns the file's 1-based line and column (in characters) of byte off of the
// value, and whether it is exact; when it is not, it is the position of the value's start.
func (e *embedded) position(off int) (line, col int, exact bool) {
	text := []byte(e.node.Value)
	if e.indent < 0 || off < 0 || off > len(text) {
		return e.node.Line, e.node.Column, false
	}
	lineNo := e.firstLine + bytes.Count(text[:off], []byte("\n"))
	start := bytes.LastIndexByte(text[:off], '\n') + 1
	colBytes := e.indent
	if start == 0 {
		colBytes = e.firstCol
	}
	if lineNo >= len(e.src.lines) {
		return e.node.Line, e.node.Column, false
	}
	src := e.src.lines[lineNo]
	if colBytes > len(src) {
		colBytes = len(src)
	}
	return lineNo + 1, utf8.RuneCount(src[:colBytes]) + utf8.RuneCount(text[start:off]) + 1, true
}

// where renders the position of byte off of the value for a message: "line L, column C" of
// the file, or, when the value's bytes do not map onto the file's, the value's start and the
// line and column inside the value.
func (e *embedded) where(off int) string {
	line, col, exact := e.position(off)
	if exact {
		return "line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col)
	}
	vl, vc := valueLineColumn([]byte(e.node.Value), off)
	return "line " + strconv.Itoa(vl) + ", column " + strconv.Itoa(vc) + " of the value at line " +
		strconv.Itoa(line) + ", column " + strconv.Itoa(col)
}

// valueLineColumn is the 1-based line and column (in characters) of byte off in text.
func valueLineColumn(text []byte, off int) (line, col int) {
	off = min(max(off, 0), len(text))
	start := bytes.LastIndexByte(text[:off], '\n') + 1
	return bytes.Count(text[:off], []byte("\n")) + 1, utf8.RuneCount(text[start:off]) + 1
}

// locate rewrites one line of the parser's error for the file: a syntax error's "invalid JSON
// at byte N (line L, column C)" (after the path of the value it was found in; the parenthesis
// is optional) becomes "at line L', column C'" of the
// file, and a message that starts with a JSON path gets the file's position of the path's
// field (or of its closest enclosing value that exists) in front. Anything else is returned
// unchanged.
func (e *embedded) locate(msg string) string {
	if e == nil {
		return msg
	}
	const syntax = "invalid JSON at byte "
	if i := strings.Index(msg, syntax); i >= 0 {
		j := i + len(syntax)
		k := j
		for k < len(msg) && msg[k] >= '0' && msg[k] <= '9' {
			k++
		}
		off, err := strconv.Atoi(msg[j:k])
		if err != nil || off > len(e.node.Value) {
			return msg
		}
		rest := msg[k:]
		if strings.HasPrefix(rest, " (line ") {
			if end := strings.IndexByte(rest, ')'); end >= 0 {
				rest = rest[end+1:]
			}
		}
		return msg[:i] + "invalid JSON at " + e.where(off) + " (byte " + strconv.Itoa(off) + " of the configuration)" + rest
	}
	path, _, ok := strings.Cut(msg, ": ")
	if !ok || path == "" || strings.ContainsAny(path, " \t") {
		return msg
	}
	off, ok := pathOffset([]byte(e.node.Value), path)
	if !ok {
		return msg
	}
	return e.where(off) + ": " + msg
}

// pathOffset returns the byte offset in doc of the value a path of the parser's form names
// ("rules[2].window", `match.headers[0]`, `["odd key"]`): the member's key for an object
// member, the element for an array element. A path that does not exist in doc is taken back to
// its longest prefix that does (a missing field is then reported at its object). ok is false
// when no prefix exists or doc is not JSON.
func pathOffset(doc []byte, path string) (int, bool) {
	offsets := map[string]int{}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if !walkJSON(doc, dec, "", offsets) {
		return 0, false
	}
	for p := path; p != ""; p = parentPath(p) {
		if off, ok := offsets[p]; ok {
			return off, true
		}
	}
	return 0, false
}

// walkJSON reads one value from dec (which reads doc) and records, for every member and
// element below it, the offset where its key or value starts under its path. It reports
// whether the value was read.
func walkJSON(doc []byte, dec *json.Decoder, path string, offsets map[string]int) bool {
	tok, err := dec.Token()
	if err != nil {
		return false
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return true
	}
	switch d {
	case '{':
		for dec.More() {
			start := nextToken(doc, int(dec.InputOffset()))
			tok, err := dec.Token()
			if err != nil {
				return false
			}
			key, _ := tok.(string)
			member := joinKey(path, key)
			offsets[member] = start
			if !walkJSON(doc, dec, member, offsets) {
				return false
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			element := path + "[" + strconv.Itoa(i) + "]"
			offsets[element] = nextToken(doc, int(dec.InputOffset()))
			if !walkJSON(doc, dec, element, offsets) {
				return false
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err == nil
}

// nextToken returns the offset of the next token in doc at or after off, past whitespace and
// the separators the decoder has not consumed yet (',' and ':').
func nextToken(doc []byte, off int) int {
	for off < len(doc) {
		switch doc[off] {
		case ' ', '\t', '\n', '\r', ',', ':':
			off++
		default:
			return off
		}
	}
	return off
}

// joinKey appends an object key to a path as the filter's parser writes it: a plain key after
// a '.', any other in brackets and quoted.
func joinKey(path, key string) string {
	if !plainKey(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func plainKey(s string) bool {
	if s == "" || len(s) > 64 {
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

// parentPath removes a path's last segment ("a.b[2]" -> "a.b" -> "a" -> "").
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		// An index or a quoted key: the bracket that opens it is the last '[' outside quotes;
		// quoted keys are rare enough that the last '[' will do.
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
		return ""
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}
