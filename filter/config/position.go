package config

import (
	"strconv"
	"unicode/utf8"
)

// withLineColumn adds the line and column of a byte offset to a JSON syntax error: the JSON
// decoder reports "at byte N", which a person editing a multi-line configuration (a YAML
// block in envoy.yaml, say) cannot find without counting. The message gains " (line L,
// column C)" after the first "byte N", lines and columns counted from 1, columns in
// characters (UTF-8 code points), as editors show them. A message without a byte offset, or
// with one beyond data, is returned unchanged. It works on the message rather than on the
// decoder's error type so that it does not depend on which JSON decoder reported it.
func withLineColumn(data []byte, msg string) string {
	const marker = "byte "
	for i := 0; i+len(marker) <= len(msg); i++ {
		if msg[i:i+len(marker)] != marker {
			continue
		}
		start := i + len(marker)
		end, off := start, 0
		for end < len(msg) && msg[end] >= '0' && msg[end] <= '9' && off <= len(data) {
			off = off*10 + int(msg[end]-'0')
			end++
		}
		if end == start || off > len(data) {
			return msg
		}
		line, col := lineColumn(data, off)
		return msg[:end] + " (line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col) + ")" + msg[end:]
	}
	return msg
}

// lineColumn returns the 1-based line and column (in characters) of byte offset off in data.
func lineColumn(data []byte, off int) (line, col int) {
	line, lineStart := 1, 0
	for i := 0; i < off; i++ {
		if data[i] == '\n' {
			line, lineStart = line+1, i+1
		}
	}
	return line, utf8.RuneCount(data[lineStart:off]) + 1
}
