package config

import (
	"strconv"
	"unicode/utf8"
)

// at locates byte offset off of data for a syntax error: "byte N (line L, column C)", lines
// and columns counted from 1, columns in characters (UTF-8 code points) as editors show them,
// so that a person editing a multi-line configuration (a YAML block in envoy.yaml, say) need
// not count bytes. An offset beyond data is given as a byte alone.
func at(data []byte, off int64) string {
	pos := "byte " + strconv.FormatInt(off, 10)
	if off < 0 || off > int64(len(data)) {
		return pos
	}
	line, lineStart := 1, 0
	for i, c := range data[:off] {
		if c == '\n' {
			line, lineStart = line+1, i+1
		}
	}
	col := utf8.RuneCount(data[lineStart:off]) + 1
	return pos + " (line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col) + ")"
}
