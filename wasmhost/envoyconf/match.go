package envoyconf

import (
	"net"
	"net/http"
	"sort"
	"strings"
)

// Match picks the route for a request the way Envoy's router does: the virtual host by the
// :authority (exact domain, then the longest "*suffix" wildcard, then the longest "prefix*"
// wildcard, then "*"), then the first route of that virtual host whose path and header
// conditions all hold. It returns nil when nothing matches (Envoy answers 404 then).
//
// path is the :path as Envoy holds it when it routes: the request target with its query
// string, after Normalize (Envoy normalises before routing). Headers, the method and
// the authority come from r.
func (l *Listener) Match(r *http.Request, path string) *Route {
	vh := l.virtualHost(r.Host)
	if vh == nil {
		return nil
	}
	for _, rt := range vh.Routes {
		if rt.Match.matches(path, r) {
			return rt
		}
	}
	return nil
}

// virtualHost implements Envoy's domain search order.
func (l *Listener) virtualHost(authority string) *VirtualHost {
	host := strings.ToLower(authority)
	if l.StripPort {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	var def *VirtualHost
	type wild struct {
		vh  *VirtualHost
		pat string
	}
	var suffixes, prefixes []wild
	for _, vh := range l.VirtualHosts {
		for _, d := range vh.Domains {
			switch {
			case d == "*":
				if def == nil {
					def = vh
				}
			case d == host:
				return vh
			case strings.HasPrefix(d, "*"):
				suffixes = append(suffixes, wild{vh, d[1:]})
			case strings.HasSuffix(d, "*"):
				prefixes = append(prefixes, wild{vh, d[:len(d)-1]})
			}
		}
	}
	// Longer wildcards are more specific; a wildcard never matches the empty string.
	sort.SliceStable(suffixes, func(i, j int) bool { return len(suffixes[i].pat) > len(suffixes[j].pat) })
	for _, w := range suffixes {
		if len(host) > len(w.pat) && strings.HasSuffix(host, w.pat) {
			return w.vh
		}
	}
	sort.SliceStable(prefixes, func(i, j int) bool { return len(prefixes[i].pat) > len(prefixes[j].pat) })
	for _, w := range prefixes {
		if len(host) > len(w.pat) && strings.HasPrefix(host, w.pat) {
			return w.vh
		}
	}
	return def
}

// matches reports whether the route matches. path is the full :path, query included.
func (m *RouteMatch) matches(path string, r *http.Request) bool {
	// A prefix is compared with the whole :path; every other kind with the path once the
	// query string (and a fragment) is removed, as Envoy documents for each field.
	p := path
	if m.Kind != PathPrefix {
		p = stripQuery(path)
	}
	if !m.CaseSensitive && m.Kind != PathRegex {
		p = strings.ToLower(p)
	}
	ok := false
	switch m.Kind {
	case PathPrefix:
		ok = strings.HasPrefix(p, m.Value)
	case PathExact:
		ok = p == m.Value
	case PathSeparatedPrefix:
		ok = p == m.Value || strings.HasPrefix(p, m.Value+"/")
	case PathRegex:
		ok = m.regex.MatchString(p)
	}
	if !ok {
		return false
	}
	for i := range m.Headers {
		if !m.Headers[i].matches(r, path) {
			return false
		}
	}
	return true
}

func stripQuery(path string) string {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		return path[:i]
	}
	return path
}

// matches follows Envoy's HeaderUtility: a missing header (unless treated as empty) matches
// only present_match: false, or present_match: true with invert_match; otherwise the specific
// match is computed on all the header's values joined by "," and inverted by invert_match.
func (h *HeaderMatcher) matches(r *http.Request, path string) bool {
	value, found := headerValue(r, h.Name, path)
	if !found && !h.MissingAsEmpty {
		if h.Invert {
			return h.Kind == "present" && h.Present
		}
		return h.Kind == "present" && !h.Present
	}
	v := value
	if h.IgnoreCase {
		v = strings.ToLower(v)
	}
	var ok bool
	switch h.Kind {
	case "present":
		ok = h.Present
	case "exact":
		ok = v == h.Value
	case "prefix":
		ok = strings.HasPrefix(v, h.Value)
	case "suffix":
		ok = strings.HasSuffix(v, h.Value)
	case "contains":
		ok = strings.Contains(v, h.Value)
	case "regex":
		ok = h.regex.MatchString(value)
	}
	return ok != h.Invert
}

// headerValue reads a request header as Envoy's header map holds it, pseudo-headers included.
func headerValue(r *http.Request, name, path string) (string, bool) {
	switch name {
	case ":method":
		return r.Method, true
	case ":authority", "host":
		return r.Host, r.Host != ""
	case ":path":
		return path, true
	case ":scheme":
		if r.TLS != nil {
			return "https", true
		}
		return "http", true
	}
	vs := r.Header.Values(name)
	if len(vs) == 0 {
		return "", false
	}
	return strings.Join(vs, ","), true
}

// PathVerdict is what the connection manager does with a request once it has looked at the
// path, before any HTTP filter or the router sees the request.
type PathVerdict int

// Path verdicts.
const (
	// PathContinue: the request goes on with the (normalised) path.
	PathContinue PathVerdict = iota
	// PathReject: Envoy answers 400 itself (path_with_escaped_slashes_action REJECT_REQUEST
	// and an escaped slash in the path).
	PathReject
	// PathRedirect: Envoy answers 307 with the normalised path as Location
	// (UNESCAPE_AND_REDIRECT and an escaped slash in the path), so that the client sends
	// again what every party will read the same way.
	PathRedirect
)

// Escaped-slash actions (path_with_escaped_slashes_action), by their enum names.
const (
	EscapedSlashesKeep             = "KEEP_UNCHANGED"
	EscapedSlashesReject           = "REJECT_REQUEST"
	EscapedSlashesUnescapeRedirect = "UNESCAPE_AND_REDIRECT"
	EscapedSlashesUnescapeForward  = "UNESCAPE_AND_FORWARD"
)

// Normalize returns the :path as Envoy routes and forwards it; see NormalizeRequest, whose
// verdict it drops.
func (l *Listener) Normalize(path string) string {
	p, _ := l.NormalizeRequest(path)
	return p
}

// NormalizeRequest applies the connection manager's path handling to a :path, in Envoy's
// order (ConnectionManagerUtility::maybeNormalizePath), to the path only (the query string
// is kept as it is):
//
//  1. path_with_escaped_slashes_action: REJECT_REQUEST answers 400 when the path holds
//     %2F or %5C (either case); the UNESCAPE actions turn them into "/" and "\", and
//     UNESCAPE_AND_REDIRECT then redirects to the result of the steps below.
//  2. normalize_path: RFC 3986 normalisation as Envoy's canonicaliser (Chromium's URL
//     library) does it: percent-encoded unreserved characters (ALPHA, DIGIT, "-", ".", "_",
//     "~") are decoded, so "/%6Cogin" is "/login"; backslashes become slashes; dot segments
//     are removed (RFC 3986 section 5.2.4), ".." never climbing above the root. Other
//     percent-encodings are kept as written, and letter case is not changed (Envoy does not
//     case-normalise paths). A NUL, raw or as %00, fails the normalisation ("Fails on
//     characters disallowed in URLs (e.g. NULLs)", Envoy's documentation of
//     normalize_path_rfc_3986), and Envoy answers 400. A '%' that starts no valid escape is
//     kept, and when decoding an escape right after it would make it start one ("%%36%66"
//     would become "%6f", which an upstream that decodes once more reads as "o"), the '%' is
//     written as "%25" instead, as the canonicaliser does, so that the result means what the
//     request did. Bytes a path may not hold as they are (controls, space, '"', '<', '>',
//     '^', '`', '{', '|', '}', DEL and non-ASCII) are percent-encoded.
//  3. merge_slashes: runs of slashes become one.
func (l *Listener) NormalizeRequest(path string) (string, PathVerdict) {
	p, query := path, ""
	if i := strings.IndexByte(path, '?'); i >= 0 {
		p, query = path[:i], path[i:]
	}
	verdict := PathContinue
	switch l.EscapedSlashes {
	case EscapedSlashesReject:
		if hasEscapedSlash(p) {
			return path, PathReject
		}
	case EscapedSlashesUnescapeRedirect, EscapedSlashesUnescapeForward:
		if hasEscapedSlash(p) {
			p = unescapeSlashes(p)
			if l.EscapedSlashes == EscapedSlashesUnescapeRedirect {
				verdict = PathRedirect
			}
		}
	}
	if l.NormalizePath {
		decoded, ok := decodeUnreserved(p)
		if !ok {
			return path, PathReject
		}
		p = removeDotSegments(strings.ReplaceAll(decoded, `\`, "/"))
	}
	if l.MergeSlashes {
		for strings.Contains(p, "//") {
			p = strings.ReplaceAll(p, "//", "/")
		}
	}
	return p + query, verdict
}

// hasEscapedSlash reports whether p holds %2F or %5C, in either case.
func hasEscapedSlash(p string) bool {
	for i := 0; i+2 < len(p); i++ {
		if p[i] == '%' && (p[i+1] == '2' && (p[i+2] == 'f' || p[i+2] == 'F') || p[i+1] == '5' && (p[i+2] == 'c' || p[i+2] == 'C')) {
			return true
		}
	}
	return false
}

// unescapeSlashes decodes %2F to "/" and %5C to "\\", in either case.
func unescapeSlashes(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) {
			switch {
			case p[i+1] == '2' && (p[i+2] == 'f' || p[i+2] == 'F'):
				b.WriteByte('/')
				i += 2
				continue
			case p[i+1] == '5' && (p[i+2] == 'c' || p[i+2] == 'C'):
				b.WriteByte('\\')
				i += 2
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// decodeUnreserved decodes percent-encoded unreserved characters (RFC 3986 section 2.3),
// which mean the same encoded or not (section 6.2.2.2), and keeps every other escape as
// written. ok is false when p holds a NUL, raw or encoded: Envoy's normalisation fails on it.
//
// A '%' that starts no valid escape is kept. When the escape decoded right after it makes it
// start one after all ("%%30" + "0" would leave "%00"), the '%' is written as "%25", so the
// result never holds an escape the request did not (see NormalizeRequest).
func decodeUnreserved(p string) (out string, ok bool) {
	if strings.IndexByte(p, 0) >= 0 {
		return p, false
	}
	if strings.IndexFunc(p, func(r rune) bool { return r == '%' || r > 0x7F || mustEscape(byte(r)) }) < 0 {
		return p, true
	}
	b := make([]byte, 0, len(p))
	stray := -1 // where in b the last '%' that started no valid escape was written
	for i := 0; i < len(p); i++ {
		if p[i] != '%' {
			if mustEscape(p[i]) {
				b = append(b, '%', upperHex[p[i]>>4], upperHex[p[i]&0x0F])
			} else {
				b = append(b, p[i])
			}
			continue
		}
		c, valid := escapeAt(p, i)
		switch {
		case !valid:
			stray = len(b)
			b = append(b, '%')
		case c == 0:
			return p, false
		case isUnreserved(c):
			b = append(b, c)
			i += 2
			if stray >= 0 && stray >= len(b)-3 {
				b = escapeStray(b, stray, p[i+1:])
			}
		default:
			b = append(b, p[i:i+3]...)
			i += 2
		}
	}
	return string(b), true
}

// escapeAt reports the byte that the escape at p[i] (a '%') encodes, and whether p[i:i+3] is
// a valid escape at all.
func escapeAt(p string, i int) (byte, bool) {
	if i+2 >= len(p) {
		return 0, false
	}
	hi, ok1 := unhex(p[i+1])
	lo, ok2 := unhex(p[i+2])
	return hi<<4 | lo, ok1 && ok2
}

// escapeStray handles a character just decoded into b within two bytes of stray, the index of
// a '%' that started no valid escape in the input. If that '%', with the bytes after it (the
// decoded one, and the input's next byte, rest[0], when only one follows it in b), now reads
// as a valid escape, the '%' becomes "%25" so that it stays a literal percent sign. The
// input's next byte is only looked at here; the caller still copies it.
func escapeStray(b []byte, stray int, rest string) []byte {
	tail := string(b[stray:])
	if len(tail) == 2 {
		if len(rest) == 0 {
			return b
		}
		tail += rest[:1]
	}
	if _, valid := escapeAt(tail, 0); !valid {
		return b
	}
	// b[stray:] is '%' and one or two characters; "%25" takes the '%''s place.
	after := append([]byte(nil), b[stray+1:]...)
	b = append(b[:stray], '%', '2', '5')
	return append(b, after...)
}

// mustEscape reports whether the canonicaliser writes byte c of a path percent-encoded.
func mustEscape(c byte) bool {
	return c <= ' ' || c >= 0x7F || strings.IndexByte("\"<>^`{|}", c) >= 0
}

const upperHex = "0123456789ABCDEF"

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func isUnreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// removeDotSegments implements RFC 3986 section 5.2.4 on an absolute path whose unreserved
// characters are already decoded (so "%2e" has become ".").
func removeDotSegments(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}
