// Package strfmt formats messages as fmt.Sprintf and fmt.Errorf do, for the verbs and
// argument types the filter's messages use, without fmt: fmt links reflect-driven printing
// into the module (about 0.78 MB of the .wasm) and its initialisation and first calls are
// V8 start-up work on every Envoy start and configuration update.
//
// The verbs are %v, %s, %d, %q, %x, %X, %f, %g, %e, %t, %c, %w and %%, with flags '+', '-',
// '#', ' ' and '0', a width and a precision, as fmt reads them. The arguments are nil,
// error, fmt.Stringer (the method, without importing fmt), string, []byte, []string, bool,
// every integer and float type, and time.Duration; an argument of any other type prints
// as fmt prints a wrong type, "%!v(unsupported)" with the verb, because without reflection a
// named type's underlying kind is unknown: convert it at the call site (string(mode)).
// Every output for the supported verbs and types equals fmt's (TestAsFmt).
package strfmt

import (
	"strconv"
	"unicode/utf8"

	"github.com/ratelimit-wasm/ratelimit/internal/duration"
)

// stringer is fmt.Stringer.
type stringer interface{ String() string }

// Sprintf formats according to a format specifier and returns the resulting string, as
// fmt.Sprintf does for the supported verbs and types.
func Sprintf(format string, args ...any) string {
	var p printer
	p.printf(format, args, false)
	return string(p.buf)
}

// Append appends the formatted message to b, as fmt.Appendf does.
func Append(b []byte, format string, args ...any) []byte {
	p := printer{buf: b}
	p.printf(format, args, false)
	return p.buf
}

// Errorf formats a message as Sprintf does and returns it as an error that wraps the %w
// arguments, as fmt.Errorf does: errors.Is and errors.As see them, and one %w gives an error
// with Unwrap() error, several an error with Unwrap() []error.
func Errorf(format string, args ...any) error {
	var p printer
	p.printf(format, args, true)
	msg := string(p.buf)
	switch len(p.wrapped) {
	case 0:
		return &plainError{msg}
	case 1:
		return &wrapError{msg, p.wrapped[0]}
	default:
		return &wrapErrors{msg, p.wrapped}
	}
}

// Wrap returns what Errorf("%w"+suffix, err) returns for a suffix without verbs or '%': an
// error whose message is err's followed by suffix and that wraps err. It runs no formatting,
// so a package-level error built with it costs a package initialiser almost nothing (on V8,
// Errorf's printer is compiled on its first call, in _initialize if an initialiser calls it).
// The message is put together when it is asked for, not here: package-level errors are built
// in _initialize, and a concatenation there made V8 compile the runtime's string
// concatenation (about 2.5 KB of function bodies) in every VM's start.
func Wrap(err error, suffix string) error {
	return &suffixError{err, suffix}
}

// suffixError is Wrap's error: err's message followed by suffix.
type suffixError struct {
	err    error
	suffix string
}

func (e *suffixError) Error() string { return e.err.Error() + e.suffix }
func (e *suffixError) Unwrap() error { return e.err }

type plainError struct{ msg string }

func (e *plainError) Error() string { return e.msg }

type wrapError struct {
	msg string
	err error
}

func (e *wrapError) Error() string { return e.msg }
func (e *wrapError) Unwrap() error { return e.err }

type wrapErrors struct {
	msg  string
	errs []error
}

func (e *wrapErrors) Error() string   { return e.msg }
func (e *wrapErrors) Unwrap() []error { return e.errs }

// printer holds one formatting's output and the state of the verb being formatted.
type printer struct {
	buf     []byte
	wrapped []error

	// The current verb's flags, width and precision.
	plus, minus, sharp, space, zero bool
	wid, prec                       int
	hasWid, hasPrec                 bool
	cur                             any // the argument being formatted
}

func (p *printer) printf(format string, args []any, errorf bool) {
	argNum := 0
	for i := 0; i < len(format); {
		if format[i] != '%' {
			j := i
			for j < len(format) && format[j] != '%' {
				j++
			}
			p.buf = append(p.buf, format[i:j]...)
			i = j
			continue
		}
		i++
		p.plus, p.minus, p.sharp, p.space, p.zero = false, false, false, false, false
		p.wid, p.prec, p.hasWid, p.hasPrec = 0, 0, false, false
	flags:
		for ; i < len(format); i++ {
			switch format[i] {
			case '+':
				p.plus = true
			case '-':
				p.minus = true
			case '#':
				p.sharp = true
			case ' ':
				p.space = true
			case '0':
				p.zero = true
			default:
				break flags
			}
		}
		for i < len(format) && format[i] >= '0' && format[i] <= '9' {
			p.wid = p.wid*10 + int(format[i]-'0')
			p.hasWid = true
			i++
		}
		if i < len(format) && format[i] == '.' {
			i++
			p.hasPrec = true
			for i < len(format) && format[i] >= '0' && format[i] <= '9' {
				p.prec = p.prec*10 + int(format[i]-'0')
				i++
			}
		}
		if i >= len(format) {
			p.buf = append(p.buf, "%!(NOVERB)"...)
			break
		}
		verb, size := utf8.DecodeRuneInString(format[i:])
		i += size
		if verb == '%' {
			p.buf = append(p.buf, '%')
			continue
		}
		if argNum >= len(args) {
			p.buf = append(p.buf, '%', '!')
			p.buf = utf8.AppendRune(p.buf, verb)
			p.buf = append(p.buf, "(MISSING)"...)
			continue
		}
		arg := args[argNum]
		argNum++
		if verb == 'w' {
			err, ok := arg.(error)
			if !errorf || !ok {
				p.cur = arg
				p.bad(verb)
				continue
			}
			p.wrapped = append(p.wrapped, err)
			verb = 'v'
		}
		p.arg(arg, verb)
	}
	if argNum < len(args) {
		p.buf = append(p.buf, "%!(EXTRA"...)
		for j, arg := range args[argNum:] {
			if j > 0 {
				p.buf = append(p.buf, ',')
			}
			p.buf = append(p.buf, ' ')
			p.buf = append(p.buf, typeName(arg)...)
			p.buf = append(p.buf, '=')
			p.hasWid, p.hasPrec, p.plus, p.minus, p.sharp, p.space, p.zero = false, false, false, false, false, false, false
			p.arg(arg, 'v')
		}
		p.buf = append(p.buf, ')')
	}
}

// bad writes fmt's mark for an argument the verb does not apply to: the verb, and the type
// and value of an argument of a type it knows (fmt's "%!d(string=x)"); without reflection
// another type's name is unknown, and the mark says "unsupported".
func (p *printer) bad(verb rune) {
	arg := p.cur
	p.buf = append(p.buf, '%', '!')
	p.buf = utf8.AppendRune(p.buf, verb)
	if tn := typeName(arg); tn != "?" {
		p.buf = append(p.buf, '(')
		p.buf = append(p.buf, tn...)
		p.buf = append(p.buf, '=')
		p.hasWid, p.hasPrec, p.plus, p.minus, p.sharp, p.space, p.zero = false, false, false, false, false, false, false
		p.arg(arg, 'v')
		p.buf = append(p.buf, ')')
		return
	}
	p.buf = append(p.buf, "(unsupported)"...)
}

// typeName names the supported types for %!(EXTRA ...).
func typeName(arg any) string {
	switch arg.(type) {
	case nil:
		return "<nil>"
	case string:
		return "string"
	case []byte:
		return "[]uint8"
	case []string:
		return "[]string"
	case bool:
		return "bool"
	case int:
		return "int"
	case int8:
		return "int8"
	case int16:
		return "int16"
	case int32:
		return "int32"
	case int64:
		return "int64"
	case uint:
		return "uint"
	case uint8:
		return "uint8"
	case uint16:
		return "uint16"
	case uint32:
		return "uint32"
	case uint64:
		return "uint64"
	case uintptr:
		return "uintptr"
	case float32:
		return "float32"
	case float64:
		return "float64"
	case duration.Duration:
		return "time.Duration"
	}
	return "?"
}

func (p *printer) arg(arg any, verb rune) {
	p.cur = arg
	if arg == nil {
		if verb == 'v' {
			p.pad("<nil>")
		} else {
			p.buf = append(p.buf, '%', '!')
			p.buf = utf8.AppendRune(p.buf, verb)
			p.buf = append(p.buf, "(<nil>)"...)
		}
		return
	}
	// Types with their own integer verbs come before the Stringer that would print them.
	switch v := arg.(type) {
	case duration.Duration:
		if verb == 'v' || verb == 's' || verb == 'q' {
			p.str(v.String(), verb)
		} else {
			p.int(int64(v), verb)
		}
		return
	case bool:
		if verb == 'v' || verb == 't' {
			p.pad(strconv.FormatBool(v))
		} else {
			p.bad(verb)
		}
		return
	case string:
		p.str(v, verb)
		return
	case []byte:
		p.str(string(v), verb)
		return
	case int:
		p.int(int64(v), verb)
		return
	case int8:
		p.int(int64(v), verb)
		return
	case int16:
		p.int(int64(v), verb)
		return
	case int32:
		p.int(int64(v), verb)
		return
	case int64:
		p.int(v, verb)
		return
	case uint:
		p.uint(uint64(v), verb)
		return
	case uint8:
		p.uint(uint64(v), verb)
		return
	case uint16:
		p.uint(uint64(v), verb)
		return
	case uint32:
		p.uint(uint64(v), verb)
		return
	case uint64:
		p.uint(v, verb)
		return
	case uintptr:
		p.uint(uint64(v), verb)
		return
	case float32:
		p.float(float64(v), 32, verb)
		return
	case float64:
		p.float(v, 64, verb)
		return
	case []string:
		if verb != 'v' && verb != 's' && verb != 'q' {
			p.bad(verb)
			return
		}
		p.buf = append(p.buf, '[')
		for i, s := range v {
			if i > 0 {
				p.buf = append(p.buf, ' ')
			}
			p.str(s, verb)
		}
		p.buf = append(p.buf, ']')
		return
	}
	// As fmt: an error's message, else a Stringer's string, for the string verbs.
	if verb == 'v' || verb == 's' || verb == 'q' || verb == 'x' || verb == 'X' {
		switch v := arg.(type) {
		case error:
			p.str(v.Error(), verb)
			return
		case stringer:
			p.str(v.String(), verb)
			return
		}
	}
	p.bad(verb)
}

// pad writes s padded to the width with spaces, on the left unless '-' is set. It is not
// inlined: its appends, copied into its eleven callers, cost about 17 KB of the module.
//
//go:noinline
func (p *printer) pad(s string) {
	n := 0
	if p.hasWid {
		n = p.wid - utf8.RuneCountInString(s)
	}
	if !p.minus {
		for ; n > 0; n-- {
			p.buf = append(p.buf, ' ')
		}
	}
	p.buf = append(p.buf, s...)
	for ; n > 0; n-- {
		p.buf = append(p.buf, ' ')
	}
}

// padNumber writes a number's text padded to the width, with zeros after the sign when
// '0' is set and '-' is not, as fmt pads numbers.
func (p *printer) padNumber(s string) {
	if p.zero && !p.minus && p.hasWid && len(s) < p.wid {
		sign := ""
		if s != "" && (s[0] == '-' || s[0] == '+' || s[0] == ' ') {
			sign, s = s[:1], s[1:]
		}
		p.buf = append(p.buf, sign...)
		for n := p.wid - len(sign) - len(s); n > 0; n-- {
			p.buf = append(p.buf, '0')
		}
		p.buf = append(p.buf, s...)
		return
	}
	p.pad(s)
}

func (p *printer) str(s string, verb rune) {
	switch verb {
	case 'v', 's':
		if p.hasPrec {
			s = truncate(s, p.prec)
		}
		p.pad(s)
	case 'q':
		if p.hasPrec {
			s = truncate(s, p.prec)
		}
		if p.sharp && strconv.CanBackquote(s) {
			p.pad("`" + s + "`")
		} else if p.plus {
			p.pad(strconv.QuoteToASCII(s))
		} else {
			p.pad(strconv.Quote(s))
		}
	case 'x', 'X':
		digits := "0123456789abcdef"
		if verb == 'X' {
			digits = "0123456789ABCDEF"
		}
		b := make([]byte, 0, 2*len(s))
		for i := 0; i < len(s); i++ {
			b = append(b, digits[s[i]>>4], digits[s[i]&0xF])
		}
		p.pad(string(b))
	default:
		p.bad(verb)
	}
}

// truncate keeps the first n runes of s, as fmt's precision does for strings.
func truncate(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

func (p *printer) int(v int64, verb rune) {
	neg := v < 0
	u := uint64(v)
	if neg {
		u = -u
	}
	p.integer(u, neg, verb)
}

func (p *printer) uint(v uint64, verb rune) { p.integer(v, false, verb) }

func (p *printer) integer(u uint64, neg bool, verb rune) {
	var digits []byte
	switch verb {
	case 'v', 'd':
		digits = strconv.AppendUint(nil, u, 10)
	case 'x':
		digits = strconv.AppendUint(nil, u, 16)
		if p.sharp {
			digits = append([]byte("0x"), digits...)
		}
	case 'X':
		digits = []byte(toUpper(strconv.FormatUint(u, 16)))
		if p.sharp {
			digits = append([]byte("0X"), digits...)
		}
	case 'c':
		p.pad(string(rune(u)))
		return
	case 'q':
		p.pad(strconv.QuoteRune(rune(u)))
		return
	default:
		p.bad(verb)
		return
	}
	if p.hasPrec {
		for len(digits) < p.prec {
			digits = append([]byte{'0'}, digits...)
		}
	}
	sign := ""
	switch {
	case neg:
		sign = "-"
	case p.plus:
		sign = "+"
	case p.space:
		sign = " "
	}
	p.padNumber(sign + string(digits))
}

func toUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func (p *printer) float(v float64, size int, verb rune) {
	prec := -1
	switch verb {
	case 'v':
		verb = 'g'
	case 'g', 'G':
	case 'f', 'F', 'e', 'E':
		prec = 6
	default:
		p.bad(verb)
		return
	}
	if p.hasPrec {
		prec = p.prec
	}
	if verb == 'F' {
		verb = 'f'
	}
	s := strconv.FormatFloat(v, byte(verb), prec, size)
	if s[0] != '-' && s[0] != '+' {
		if p.plus {
			s = "+" + s
		} else if p.space {
			s = " " + s
		}
	}
	// fmt writes infinities with a sign only when asked; strconv always signs +Inf.
	if s == "+Inf" && !p.plus {
		s = "+Inf"
		if p.space {
			s = " Inf"
		}
	}
	if s == "NaN" || s == "+Inf" || s == "-Inf" || s == " Inf" || s == "+NaN" || s == " NaN" {
		p.pad(s) // fmt does not pad infinities and NaN with zeros
		return
	}
	p.padNumber(s)
}
