package config

import (
	"regexp"
	"slices"
	"strings"
)

// Request is what rules look at. The filter implements it over proxy-wasm calls, lazily
// and with caching, so a rule that never looks at a header never costs a host call.
type Request interface {
	// Header returns a request header's value; name is lower-case. Multiple header lines
	// with the same name are joined by "," (the filter does so for x-forwarded-for, and
	// otherwise returns the first line, as Envoy's single-value lookup does; key parts and
	// cost headers read HeaderLines too).
	Header(name string) (string, bool)
	// HeaderLines returns the first and the last line of a request header and how many
	// lines the request carries (0: absent, and first and last are empty); name is
	// lower-case. Key parts use it to see a repeated header (see Rule.DuplicatePart), and a
	// cost header on several lines is charged its max (see Rule.Cost).
	HeaderLines(name string) (first, last string, n int)
	// Method returns :method.
	Method() string
	// Path returns :path, including the query string.
	Path() string
	// Route returns the xds.route_name property ("" when no route matched).
	Route() string
	// VirtualHost returns the xds.virtual_host_name property.
	VirtualHost() string
	// SourceAddress returns the source.address property, "ip:port".
	SourceAddress() string
	// ClientIPCache returns where ClientIP keeps its result for this request, or nil to have
	// it computed on every call. A request that returns a cache must empty it (Reset, or
	// zero it) before it is used for another request. (A method rather than an optional
	// interface: a type assertion to an interface is an itab lookup on every call in Wasm.)
	ClientIPCache() *ClientIPCache
}

// Match returns, in config order, the rules that apply to req, appended to dst.
//
// Rules are evaluated in order. The first rule that applies is returned and evaluation
// stops there, unless that rule has Continue set, in which case later rules are evaluated
// too (so a request can be counted per client IP and per tenant). A rule applies when all
// its match conditions hold and every key part without a default is present in the
// request: a rule that cannot build its key for a request is skipped, and evaluation goes
// on, which lets a "per-tenant" rule fall through to a "per-IP" rule for requests without a
// tenant.
//
// Match does not allocate when dst has room and the rules use no regular expressions.
func (c *Config) Match(req Request, dst []*Rule) []*Rule {
	return c.MatchSkipped(req, dst, nil)
}

// MatchSkipped is Match that also appends to *skipped, when skipped is not nil, each rule
// whose conditions hold but whose key cannot be built (a key part without a default is
// missing): the rule skips the request, which its skipped count records. It does not
// allocate when dst and *skipped have room and the rules use no regular expressions.
func (c *Config) MatchSkipped(req Request, dst []*Rule, skipped *[]*Rule) []*Rule {
	for _, r := range c.Rules {
		// The rule applies when its conditions hold and its key can be built (written here,
		// not in a function that a VM's first request would compile too).
		if r.Match.conditional() && !r.Match.matches(req) {
			continue
		}
		if _, ok := r.walkKey(nil, req, walkAvailable); !ok {
			if skipped != nil {
				*skipped = appendRule(*skipped, r)
			}
			continue
		}
		// Into dst's room (the filter's list has room for every rule), else by an append out
		// of line: an append's growth is code of its own.
		if n := len(dst); n < cap(dst) {
			dst = dst[:n+1]
			dst[n] = r
		} else {
			dst = appendRule(dst, r)
		}
		if !r.Continue {
			break
		}
	}
	return dst
}

// appendRule is Match's append for a list without room, not inlined: the compiler would write
// the append's growth path at both of Match's call sites, which a VM's first request compiles.
//
//go:noinline
func appendRule(dst []*Rule, r *Rule) []*Rule { return append(dst, r) }

// conditional reports whether the match has any condition. Most rules have none: asking
// first keeps Match.matches out of a VM's first request for them.
func (m *Match) conditional() bool {
	return len(m.Routes) > 0 || len(m.Methods) > 0 || m.Path != nil || len(m.VirtualHosts) > 0 ||
		len(m.Headers) > 0
}

// matches reports whether every condition holds for req. Cheap conditions are checked
// first so that most rules are rejected before any header is read.
func (m *Match) matches(req Request) bool {
	if len(m.Routes) > 0 && !m.routes.has(req.Route()) {
		return false
	}
	if len(m.Methods) > 0 && !m.methods.has(req.Method()) {
		return false
	}
	if m.Path != nil && !m.Path.matches(pathOnly(req.Path())) {
		return false
	}
	if len(m.VirtualHosts) > 0 && !m.vhosts.has(req.VirtualHost()) {
		return false
	}
	for i := range m.Headers {
		if !m.Headers[i].matches(req) {
			return false
		}
	}
	return true
}

// matches compares a path that has no query string. Paths are compared as Envoy hands them
// over: no decoding or normalisation is done here, so enable Envoy's normalize_path and
// merge_slashes if clients might write /api//login or /api/%6Cogin.
func (pm *PathMatch) matches(path string) bool { return compare(pm.Kind, path, pm.Value, pm.re) }

// matches evaluates the header condition against req, including Invert.
func (hm *HeaderMatch) matches(req Request) bool {
	v, ok := req.Header(hm.Name)
	if hm.Kind == MatchPresent || hm.Kind == MatchAbsent {
		return (ok == (hm.Kind == MatchPresent)) != hm.Invert
	}
	return (ok && compare(hm.Kind, v, hm.Value, hm.re)) != hm.Invert
}

// compare reports whether s is value (MatchExact), starts with it (MatchPrefix) or matches
// re (MatchRegex).
func compare(kind StringMatchKind, s, value string, re *regexp.Regexp) bool {
	switch kind {
	case MatchExact:
		return s == value
	case MatchPrefix:
		return strings.HasPrefix(s, value)
	case MatchRegex:
		return re.MatchString(s)
	}
	return false
}

// pathOnly strips the query string (and a fragment, should one ever arrive), so that a
// client cannot step around a path condition by appending "?x".
func pathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// stringSet is an any-of set of exact strings. Short lists are scanned, which beats hashing
// for the handful of routes a rule usually names; long lists use a map.
type stringSet struct {
	list []string
	m    map[string]struct{}
}

func newStringSet(list []string) stringSet {
	s := stringSet{list: list}
	if len(list) > 8 {
		s.m = make(map[string]struct{}, len(list))
		for _, x := range list {
			s.m[x] = struct{}{}
		}
	}
	return s
}

func (s *stringSet) has(x string) bool {
	if s.m != nil {
		_, ok := s.m[x]
		return ok
	}
	return slices.Contains(s.list, x)
}
