package config

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// parser collects problems while walking the JSON tree. Every helper reports its own
// problems and returns ok=false, so callers only decide what to do next.
type parser struct {
	errs       Errors
	dropped    int
	regexInsts int // the program size of the regular expressions compiled so far
}

// add records a problem at path, or only counts it once maxErrors are recorded. Not inlined:
// at its ninety-odd call sites it would add about 69 KB that every configure would compile.
//
//go:noinline
func (p *parser) add(path, msg string) {
	if len(p.errs) >= maxErrors {
		p.dropped++
		return
	}
	p.errs = append(p.errs, &Error{Path: path, Msg: msg})
}

// result returns the collected problems as an error, or nil.
func (p *parser) result() error {
	if len(p.errs) == 0 {
		return nil
	}
	return p.problems()
}

// problems returns the collected problems, of which there are some, as an error (out of
// line).
func (p *parser) problems() error {
	errs := p.errs
	if p.dropped > 0 {
		errs = append(errs[:len(errs):len(errs)], &Error{Msg: "... and " + strconv.Itoa(p.dropped) + " more problems"})
	}
	return errs
}

// fields gives access to an object's members after its unknown fields were reported.
type fields struct {
	n    *node
	path string
}

// get returns the member named key (nil when absent) and its path.
func (f fields) get(key string) (*node, string) { return f.n.lookup(key), joinKey(f.path, key) }

func (f fields) has(key string) bool { return f.n.lookup(key) != nil }

// object checks that n is an object and reports every member that is not in known: an
// unknown field is an error at every level, because a typo ("limt") must not silently
// disable a limit.
func (p *parser) object(path string, n *node, known ...string) (fields, bool) {
	if n.kind != kindObject {
		p.wrongType(path, "an object", n)
		return fields{}, false
	}
	for _, m := range n.members {
		if !slices.Contains(known, m.key) {
			p.unknownField(path, m.key, known)
		}
	}
	return fields{n: n, path: path}, true
}

// unknownField reports the member key of the object at path as unknown, with a suggestion
// from known when one is close (out of line).
func (p *parser) unknownField(path, key string, known []string) {
	if len(p.errs) >= maxErrors {
		// The problem would not be reported; skip the edit distances, which for an object
		// of 80,000 unknown keys would cost seconds.
		p.dropped++
		return
	}
	msg := "unknown field"
	if s := suggest(key, known); s != "" {
		msg += " (did you mean " + strconv.Quote(s) + "?)"
	}
	p.add(joinKey(path, key), msg)
}

// wrongType reports a value at path of another JSON type than want ("an object", "a
// string" ...), for every reader (out of line).
func (p *parser) wrongType(path, want string, n *node) {
	p.add(path, "want "+want+", got "+n.describe())
}

// suggest returns the known name closest to a misspelt one, if it is close enough to be
// a likely typo.
func suggest(s string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(s), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance, bounded to short inputs (field names).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// pattern reads a string of at most maxLen bytes into *dst when valid accepts it, else
// reports it followed by msg; it reports whether the string was read.
func (p *parser) pattern(path string, n *node, maxLen int, dst *string, valid func(string) bool, msg string) bool {
	s, ok := p.str(path, n, maxLen)
	if ok && !valid(s) {
		p.add(path, quote(s)+msg)
		ok = false
	}
	if ok {
		*dst = s
	}
	return ok
}

// str reads a string of at most maxLen bytes.
func (p *parser) str(path string, n *node, maxLen int) (string, bool) {
	if n.kind != kindString {
		p.wrongType(path, "a string", n)
		return "", false
	}
	if len(n.s) > maxLen {
		p.tooLong(path, len(n.s), maxLen)
		return "", false
	}
	return n.s, true
}

// tooLong reports a string of n bytes, at path, longer than maxLen (out of line).
func (p *parser) tooLong(path string, n, maxLen int) {
	p.add(path, "is "+strconv.Itoa(n)+" bytes long; the maximum is "+strconv.Itoa(maxLen))
}

// boolean reads true or false.
func (p *parser) boolean(path string, n *node) (bool, bool) {
	if n.kind != kindBool {
		p.wrongType(path, "true or false", n)
		return false, false
	}
	return n.b, true
}

// integer reads an integer in [lo, hi]. JSON numbers with a fraction or exponent are
// rejected rather than rounded: "1.5 requests" is a mistake worth hearing about. A plain
// integer in range is read here, anything else by anyInteger, out of line.
func (p *parser) integer(path string, n *node, lo, hi int64) (int64, bool) {
	if v, ok := smallInteger(n.s); ok && n.kind == kindNumber && v >= lo && v <= hi {
		return v, true
	}
	return p.anyInteger(path, n, lo, hi)
}

// anyInteger is integer for any value other than a plain integer in range. It uses
// strings.IndexByte, which the module runs anyway, rather than strings.ContainsAny.
func (p *parser) anyInteger(path string, n *node, lo, hi int64) (int64, bool) {
	if n.kind != kindNumber || strings.IndexByte(n.s, '.') >= 0 || strings.IndexByte(n.s, 'e') >= 0 || strings.IndexByte(n.s, 'E') >= 0 {
		p.wrongType(path, "an integer", n)
		return 0, false
	}
	v, err := strconv.ParseInt(n.s, 10, 64)
	if err != nil || v < lo || v > hi {
		p.outOfRange(path, n, lo, hi)
		return 0, false
	}
	return v, true
}

// smallInteger parses 1 to 18 decimal digits (which cannot overflow an int64), the form nearly
// every configured integer has, so that strconv.ParseInt is compiled only for the others
// (TestSmallIntegerAgrees).
func smallInteger(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var v int64
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		v = v*10 + int64(s[i]-'0')
	}
	return v, true
}

func (p *parser) outOfRange(path string, n *node, lo, hi int64) {
	p.add(path, rangeMsg(strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10), n.describe()))
}

// intField reads an int-typed integer; the bounds always fit an int.
func (p *parser) intField(path string, n *node, lo, hi int) (int, bool) {
	v, ok := p.integer(path, n, int64(lo), int64(hi))
	return int(v), ok
}

// opt reads f's optional member name with read, bounded by [lo, hi], into *dst when it is
// valid, and reports false when it is set but invalid (read reports the problem); an absent
// member leaves *dst as it is.
func opt[T any](f fields, name string, lo, hi T, dst *T, read func(path string, n *node, lo, hi T) (T, bool)) bool {
	n, path := f.get(name)
	if n == nil {
		return true
	}
	v, ok := read(path, n, lo, hi)
	if ok {
		*dst = v
	}
	return ok
}

// need is opt for a required member: an absent one is reported as "required" followed by why.
func need[T any](p *parser, f fields, name, why string, lo, hi T, dst *T, read func(path string, n *node, lo, hi T) (T, bool)) bool {
	if n, path := f.get(name); n == nil {
		p.add(path, "required"+why)
		return false
	}
	return opt(f, name, lo, hi, dst, read)
}

// optEnum is opt for a member whose value is one of allowed.
func optEnum[T ~string](p *parser, f fields, name string, dst *T, allowed ...string) bool {
	n, path := f.get(name)
	if n == nil {
		return true
	}
	s, ok := p.enum(path, n, allowed...)
	if ok {
		*dst = T(s)
	}
	return ok
}

// float reads a number in [lo, hi].
func (p *parser) float(path string, n *node, lo, hi float64) (float64, bool) {
	if n.kind != kindNumber {
		p.wrongType(path, "a number", n)
		return 0, false
	}
	v, err := strconv.ParseFloat(n.s, 64)
	if err != nil || v < lo || v > hi {
		p.add(path, rangeMsg(strconv.FormatFloat(lo, 'g', -1, 64), strconv.FormatFloat(hi, 'g', -1, 64), n.describe()))
		return 0, false
	}
	return v, true
}

func rangeMsg(lo, hi, got string) string {
	return "must be between " + lo + " and " + hi + ", got " + got
}

// duration reads a duration string in [lo, hi].
func (p *parser) duration(path string, n *node, lo, hi time.Duration) (time.Duration, bool) {
	if n.kind != kindString {
		p.wrongType(path, `a duration string like "1s"`, n)
		return 0, false
	}
	d, msg := parseDuration(n.s)
	if msg != "" {
		p.add(path, msg)
		return 0, false
	}
	if d <= 0 || d < lo || d > hi {
		p.durationRange(path, n.s, d, lo, hi)
		return 0, false
	}
	return d, true
}

// durationRange reports a duration d, read from s at path, that is not positive or not in
// [lo, hi] (out of line).
func (p *parser) durationRange(path, s string, d, lo, hi time.Duration) {
	if d <= 0 {
		p.add(path, "must be positive, got "+quote(s))
		return
	}
	p.add(path, "must be between "+fmtBound(lo)+" and "+fmtBound(hi)+", got "+quote(s))
}

// fmtBound writes a duration bound the way a person would type it.
func fmtBound(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	// "1m0s" reads better as "1m", and "1h0m0s" as "1h".
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// enum reads a string that must be one of allowed.
func (p *parser) enum(path string, n *node, allowed ...string) (string, bool) {
	if n.kind != kindString {
		p.wrongType(path, "a string", n)
		return "", false
	}
	if slices.Contains(allowed, n.s) {
		return n.s, true
	}
	p.notOneOf(path, n.s, allowed)
	return "", false
}

// notOneOf reports s, at path, as none of allowed, with a suggestion when one is close (out
// of line).
func (p *parser) notOneOf(path, s string, allowed []string) {
	msg := quote(s) + " is not one of " + strings.Join(allowed, ", ")
	if sug := suggest(strings.ReplaceAll(s, "-", "_"), allowed); sug != "" {
		msg += " (did you mean " + strconv.Quote(sug) + "?)"
	}
	p.add(path, msg)
}

// array reads an array with between lo and hi elements.
func (p *parser) array(path string, n *node, lo, hi int) ([]*node, bool) {
	if n.kind != kindArray {
		p.wrongType(path, "an array", n)
		return nil, false
	}
	if len(n.elems) < lo || len(n.elems) > hi {
		p.itemCount(path, len(n.elems), lo, hi)
		return nil, false
	}
	return n.elems, true
}

// itemCount reports an array at path whose count of items is not in [lo, hi].
func (p *parser) itemCount(path string, count, lo, hi int) {
	switch {
	case count < lo && lo == 1:
		p.add(path, "must not be empty")
	case count < lo:
		p.add(path, "has "+strconv.Itoa(count)+" items; the minimum is "+strconv.Itoa(lo))
	default:
		p.add(path, "has "+strconv.Itoa(count)+" items; the maximum is "+strconv.Itoa(hi))
	}
}

// onlyChars reports whether s is not empty and holds only ASCII letters, digits and the bytes
// of extra.
func onlyChars(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') && strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return s != ""
}

// isName reports whether s is a valid rule name or domain: [A-Za-z0-9_.-]{1,64}. The
// charset keeps names safe in metric names, keys, logs and JSON bodies without escaping.
func isName(s string) bool { return len(s) <= maxNameLen && onlyChars(s, "_.-") }

// isToken reports whether s is an HTTP token (RFC 9110).
func isToken(s string) bool { return onlyChars(s, "!#$%&'*+-.^_`|~") }

// headerName validates and lower-cases a header name. Envoy lower-cases header names, so
// a configured "X-Tenant" must be looked up as "x-tenant". Pseudo-headers such as
// ":authority" are allowed because Envoy exposes them in the request header map.
func (p *parser) headerName(path string, n *node) (string, bool) {
	s, ok := p.str(path, n, 256)
	if !ok {
		return "", false
	}
	// The name is checked before it is lower-cased: strings.ToLower turns some non-ASCII
	// letters into ASCII ones (the Kelvin sign into "k").
	if !isToken(strings.TrimPrefix(s, ":")) {
		p.badHeaderName(path, s)
		return "", false
	}
	return strings.ToLower(s), true
}

// badHeaderName reports s, at path, as no valid header name.
func (p *parser) badHeaderName(path, s string) {
	p.add(path, quote(s)+" is not a valid header name")
}

// isFieldValue reports whether s may be sent as an HTTP field value: no control
// characters other than tab, so that a config cannot smuggle CR LF into a response.
func isFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
