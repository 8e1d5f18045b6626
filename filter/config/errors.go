package config

import (
	"strings"
)

// maxErrors bounds how many problems Parse reports, so that a huge broken config cannot
// produce an equally huge error message in Envoy's log.
const maxErrors = 100

// Error is one problem found in a configuration. Path is the JSON path of the offending
// value, written the way a person reads it ("rules[2].match.path.regex"), or for a syntax
// error the value or object it is in; it is empty for problems with the document as a
// whole, such as its size. Msg says what is wrong.
type Error struct{ Path, Msg string }

// Error formats the problem as "path: message" (or just the message when there is no path).
func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Errors is every problem Parse found, in document order, so that an operator fixes a config
// in one round trip. The list is capped at 100 entries; a final entry says how many more were
// left out.
type Errors []*Error

// Error joins the problems, one per line.
func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap exposes the individual problems to errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
