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

// Normalize applies the connection manager's normalize_path and merge_slashes to a
// :path (query string kept as it is), as Envoy does before routing and before any HTTP filter
// sees the request: dot segments are removed (RFC 3986 section 5.2.4, with "%2e" counted as
// a dot), backslashes become slashes, and with merge_slashes runs of slashes become one.
// Envoy's normaliser also canonicalises percent-encoding; that part is not reproduced.
func (l *Listener) Normalize(path string) string {
	if !l.NormalizePath && !l.MergeSlashes {
		return path
	}
	p, query := path, ""
	if i := strings.IndexByte(path, '?'); i >= 0 {
		p, query = path[:i], path[i:]
	}
	if l.NormalizePath {
		p = removeDotSegments(strings.ReplaceAll(p, `\`, "/"))
	}
	if l.MergeSlashes {
		for strings.Contains(p, "//") {
			p = strings.ReplaceAll(p, "//", "/")
		}
	}
	return p + query
}

func removeDotSegments(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch strings.ToLower(strings.ReplaceAll(strings.ReplaceAll(s, "%2e", "."), "%2E", ".")) {
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
