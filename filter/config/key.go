package config

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Duplicate says what a header or query key part does with a header or query parameter the
// request carries more than once. A key must be unambiguous: keying on one of the values
// while the upstream reads another lets a client rotate the value the limiter sees and keep
// the one the upstream honours, and keying on every value joined lets it rotate one of them
// just the same.
type Duplicate string

// The choices for a repeated key header or query parameter.
const (
	DuplicateReject Duplicate = "reject" // the default: refuse the request with 400 (see Rule.DuplicatePart)
	DuplicateFirst  Duplicate = "first"  // key on the first line, for an upstream that reads the first
	DuplicateLast   Duplicate = "last"   // key on the last line, for an upstream that reads the last
)

// duplicates lists the accepted values of "on_duplicate", in the order the errors name them.
var duplicates = []string{string(DuplicateReject), string(DuplicateFirst), string(DuplicateLast)}

// DuplicatePart reports the first of the rule's header and query key parts whose header or
// query parameter req carries more than once while the part's OnDuplicate is DuplicateReject
// (the default): such a request has no unambiguous key for the rule and must be refused (the
// filter answers 400) before AppendKey is asked for its key, which it would not build.
//
// A header's count is of its lines as the filter sees them (Request.HeaderLines): Envoy folds
// the headers its header map indexes inline (x-forwarded-for, user-agent, :authority ...)
// into one value joined by ",", which both the filter and the upstream then see. A query
// parameter's count is of the pairs whose decoded name is the part's name ("?k=a&k=b" twice,
// "?k=a&%6B=b" too): frameworks differ in which of them they read.
func (r *Rule) DuplicatePart(req Request) (kp *KeyPart, dup bool) {
	if !r.RepeatsKeyPart(req) {
		return nil, false
	}
	return r.duplicatePart(req)
}

// RepeatsKeyPart reports whether DuplicatePart finds a part, without naming it, with the walk
// AppendKey compiles anyway: every request asks it of every matched rule.
func (r *Rule) RepeatsKeyPart(req Request) bool {
	_, ok := r.walkKey(nil, req, walkDuplicate)
	return !ok
}

// duplicatePart is DuplicatePart's search for the part, for a request that has one (out of
// line).
func (r *Rule) duplicatePart(req Request) (kp *KeyPart, dup bool) {
	for i := range r.Key {
		kp := &r.Key[i]
		if kp.OnDuplicate != DuplicateReject && kp.OnDuplicate != "" {
			continue
		}
		var n int
		switch r.keyKind(i) {
		case kindHeader:
			_, _, n = req.HeaderLines(kp.Name)
		case kindQuery:
			n = queryCount(req, kp.Name)
		}
		if n > 1 {
			return kp, true
		}
	}
	return nil, false
}

// queryCount returns how many query parameters of req are called name (out of line: most
// rules key on no query parameter).
func queryCount(req Request, name string) int {
	_, _, n := queryParams(req.Path(), name)
	return n
}

// AppendKey appends the rule's key for req to dst and returns the extended slice.
//
// The key is the rule's descriptor parts in order, each written as its length in decimal,
// a colon and its bytes ("3:abc"). The length prefix makes the encoding unambiguous:
// parts "a,b" and "a","b" give "3:a,b" and "1:a1:b", and no header value, however long and
// whatever bytes it holds, can imitate a part boundary. Values are never truncated (that
// would merge distinct clients into one key): sharedstate addresses a key by its keyed
// SipHash-2-4 digest, and a Redis key ends with the key whole (redis.AppendPartKey). The key
// does not include the domain or rule name: the state layer namespaces by those.
//
// A part that is missing from the request uses its Default; without a default, AppendKey
// returns dst unchanged and ok=false, and the rule must not be applied to the request
// (Config.Match already skips such rules). A header part whose header is repeated under
// DuplicateReject has no key either, even with a default (the header is there, just
// ambiguous): callers check Rule.DuplicatePart first to refuse such a request. A rule with no
// key parts has one key: the empty string.
func (r *Rule) AppendKey(dst []byte, req Request) (key []byte, ok bool) {
	return r.walkKey(dst, req, walkBuild)
}

// What walkKey does: build the key (AppendKey), check that it can be built (Match), or look
// for a repeated part under DuplicateReject (DuplicatePart; ok when there is none).
const (
	walkBuild uint8 = iota
	walkAvailable
	walkDuplicate
)

// walkKey is AppendKey, Match's check or DuplicatePart's check, as mode says: one walk, so
// that they agree on what each source holds and one copy is compiled instead of three. The
// lookup and the writing are inline: each function and call site is code of its own to
// compile.
func (r *Rule) walkKey(dst []byte, req Request, mode uint8) ([]byte, bool) {
	start := len(dst)
	for i := range r.Key {
		kp, k := &r.Key[i], r.keyKind(i)
		switch mode {
		case walkAvailable:
			if kp.HasDefault {
				continue
			}
		case walkDuplicate:
			// Only a header or query part left at on_duplicate "reject" can be ambiguous.
			if k != kindHeader && k != kindQuery || kp.OnDuplicate != DuplicateReject && kp.OnDuplicate != "" {
				continue
			}
		}
		// What req holds for the part: a query parameter still percent-encoded
		// (appendQueryPart decodes it), a client IP in ip rather than v.
		var v string
		var ip netip.Addr
		var st partState
		switch k {
		case kindConst:
			v, st = kp.Value, partFound
		case kindHeader:
			v, st = kp.choose(req.HeaderLines(kp.Name))
		case kindClientIP:
			var ok bool
			ip, ok = ClientIP(req, r.trustedHops)
			st = found(ok)
		default:
			v, st = kp.lookupOther(k, req)
		}
		if mode != walkBuild {
			// For walkAvailable a repeated header counts as present: the rule applies, and
			// the request is refused by DuplicatePart rather than let through to later rules.
			if st == partMissing && mode == walkAvailable || st == partAmbiguous && mode == walkDuplicate {
				return dst, false
			}
			continue
		}
		if st == partMissing && kp.HasDefault {
			k, v, st = kindConst, kp.Default, partFound // written as a constant part is
		}
		if st != partFound {
			return dst[:start], false
		}
		switch k {
		case kindQuery:
			dst = appendQueryPart(dst, v)
			continue
		case kindClientIP:
			// Most rules key on the whole address, and a request that wrote it in canonical
			// form (the usual IPv4 case) has its text in the cache (see ClientIP): it is
			// written as a header's value is, by the one appendPart below.
			m := req.ClientIPCache()
			if m == nil || m.text == "" || kp.prefixBits(ip) < ip.BitLen() {
				dst = kp.appendIPValue(dst, req, ip)
				continue
			}
			v = m.text
		}
		dst = appendPart(dst, v)
	}
	return dst, true
}

// partState says what a request holds for one key part.
type partState uint8

const (
	partMissing   partState = iota // not carried: the part's default, if any, applies
	partFound                      // carried
	partAmbiguous                  // repeated under DuplicateReject: no value, and no default either
)

// lookupOther is walkKey's lookup for the sources other than a constant, a header and the
// client IP, which most rules key on (out of line).
func (kp *KeyPart) lookupOther(k sourceKind, req Request) (v string, st partState) {
	switch k {
	case kindQuery:
		// A query parameter is returned still percent-encoded (appendQueryPart decodes it); an
		// empty value ("?key=") is a value: the parameter is present.
		return kp.choose(queryParams(req.Path(), kp.Name))
	case kindMethod:
		v = req.Method()
	case kindRoute:
		v = req.Route()
	case kindPath:
		// Without the query string: otherwise every "?cachebuster" would be a new key.
		v = pathOnly(req.Path())
	}
	return v, found(v != "")
}

// choose picks a header part's value (a query part's) from the first and last of its n lines
// (parameters): the only one, or the first or last of several as the part's OnDuplicate says;
// several under DuplicateReject are ambiguous.
func (kp *KeyPart) choose(first, last string, n int) (string, partState) {
	switch {
	case n == 0:
		return "", partMissing
	case n == 1 || kp.OnDuplicate == DuplicateFirst:
		return first, partFound
	case kp.OnDuplicate == DuplicateLast:
		return last, partFound
	}
	return "", partAmbiguous
}

// sourceKind is a key part's Source as a small integer. The request path switches on it for
// every key part of every matching rule: a switch over Source compares strings (a call of
// runtime.memequal in a Wasm VM), one over an integer is a jump table.
type sourceKind uint8

const (
	kindUnknown sourceKind = iota
	kindClientIP
	kindHeader
	kindQuery
	kindPath
	kindMethod
	kindRoute
	kindConst
)

// kindOf maps a Source to its kind (keySources lists the sources in the order of their
// kinds). Not inlined: keyKind, inlined on the request path, calls it only for a Rule the
// parser did not make.
//
//go:noinline
func kindOf(s Source) sourceKind {
	return sourceKind(slices.Index(keySources, string(s)) + 1)
}

// keyKind returns the kind of key part i: the one the parser recorded (see Rule.Key), or, for
// a Rule made some other way (or whose number of key parts changed since), the one the
// part's Source names.
func (r *Rule) keyKind(i int) sourceKind {
	if len(r.keyKinds) == len(r.Key) {
		return r.keyKinds[i]
	}
	return kindOf(r.Key[i].Source)
}

// setSourceKinds records the kind of each of the rule's key parts, once its parts are parsed.
func (r *Rule) setSourceKinds() {
	r.keyKinds = make([]sourceKind, len(r.Key))
	for i := range r.Key {
		r.keyKinds[i] = kindOf(r.Key[i].Source)
	}
}

func found(ok bool) partState {
	if ok {
		return partFound
	}
	return partMissing
}

func appendPart(dst []byte, v string) []byte {
	dst = appendLen(dst, len(v))
	return append(dst, v...)
}

// appendLen appends a key part's length prefix: n in decimal and a colon.
func appendLen(dst []byte, n int) []byte {
	return append(strconv.AppendInt(dst, int64(n), 10), ':')
}

// appendQueryPart appends the percent-encoded query parameter value v decoded, so that
// "?key=abc" and "?key=%61bc" (the same key to the backend) count together (out of line).
func appendQueryPart(dst []byte, v string) []byte {
	dst = appendLen(dst, unescapedLen(v))
	return appendUnescaped(dst, v)
}

// appendIPValue appends the client IP part for an address the request did not write in
// canonical form, or masked to a prefix (out of line): the whole address is rendered once per
// request into the cache, a prefix (or an address without a cache) into dst.
func (kp *KeyPart) appendIPValue(dst []byte, req Request, ip netip.Addr) []byte {
	if m := req.ClientIPCache(); m != nil && kp.prefixBits(ip) >= ip.BitLen() {
		if m.partLen != 0 {
			return append(dst, m.part[:m.partLen]...)
		}
		part := kp.appendIPPart(m.part[:0], ip)
		if len(part) > len(m.part) { // cannot happen: kept for safety
			return append(dst, part...)
		}
		m.partLen = uint8(len(part))
		return append(dst, part...)
	}
	return kp.appendIPPart(dst, ip)
}

func (kp *KeyPart) appendIPPart(dst []byte, ip netip.Addr) []byte {
	var buf [64]byte
	b := kp.appendIP(buf[:0], ip)
	dst = appendLen(dst, len(b))
	return append(dst, b...)
}

// prefixBits returns the prefix length the part masks ip to; the address's bit length or more
// means no masking.
func (kp *KeyPart) prefixBits(ip netip.Addr) int {
	if ip.Is4() {
		return kp.IPv4Prefix
	}
	return kp.IPv6Prefix
}

// appendIP writes the address, masked to the configured prefix when one is set
// ("203.0.113.0/24"), so that addresses in one network share a key.
func (kp *KeyPart) appendIP(dst []byte, ip netip.Addr) []byte {
	bits := kp.prefixBits(ip)
	if bits >= ip.BitLen() || bits < 0 { // a negative prefix cannot come from a valid configuration
		return ip.AppendTo(dst)
	}
	pfx, _ := ip.Prefix(bits) // no error: 0 <= bits < BitLen, and ClientIP's address has no zone
	dst = pfx.Addr().AppendTo(dst)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, int64(bits), 10)
}

// ClientIP returns the client's IP address for req.
//
// With trustedHops 0 it is the IP of the source.address property, and X-Forwarded-For is
// ignored. With trustedHops N > 0 it is the N-th entry from the right of X-Forwarded-For
// (all header lines, joined by ","): the right-most N-1 entries were appended by proxies
// we trust, and the N-th was appended by the first of them, about the peer it saw. Entries
// further left are whatever the client sent and are never used. If X-Forwarded-For is
// absent, has fewer than N entries, or its N-th entry is not an IP address, the source
// address is used, as Envoy does for its own xff_num_trusted_hops.
//
// Counting is over the header as the filter sees it, after Envoy's connection manager ran.
// With use_remote_address: true (and skip_xff_append unset) Envoy appends the address of
// its own peer, so that entry counts as one of the N: N = trusted proxies in front of
// Envoy + 1. With use_remote_address: false Envoy appends nothing: N = number of trusted
// proxies. Simpler still is to configure Envoy's own xff_num_trusted_hops and leave
// trusted_hops at 0: Envoy then reports the client it derived as source.address.
//
// Addresses may carry a port ("1.2.3.4:5", "[::1]:5"); the port, an IPv6 zone and the
// IPv4-mapped IPv6 form are all dropped, so one client always yields one address.
//
// A Request whose ClientIPCache returns a cache computes the address once per request, not
// twice per rule (Match, then AppendKey): each parse costs 0.7 (IPv4) to 1.2 (IPv6)
// microseconds in a Wasm VM (wazero).
func ClientIP(req Request, trustedHops int) (netip.Addr, bool) {
	m := req.ClientIPCache()
	if m != nil && m.valid && m.hops == trustedHops {
		return m.ip, m.ok
	}
	// Parsed here, for a request with a cache and one without: one function to compile.
	var ip netip.Addr
	var text string
	ok := false
	if trustedHops > 0 {
		ip, text, ok = forwardedFor(req, trustedHops)
	}
	if !ok {
		ip, text, ok = parseIPText(req.SourceAddress())
	}
	if m != nil {
		// Field by field, not *m = ClientIPCache{...}, which builds the cache aside and copies
		// it back with a typed memmove. The part's bytes are read only up to partLen.
		m.valid, m.hops, m.ip, m.ok, m.text, m.partLen = true, trustedHops, ip, ok, text, 0
	}
	return ip, ok
}

// ClientIPCache holds one request's client IP (see Request.ClientIPCache); the zero value is
// empty.
type ClientIPCache struct {
	valid bool
	ok    bool
	hops  int
	ip    netip.Addr
	// text is the address as the request wrote it when that is its canonical form (an IPv4
	// address, the usual case; see parseIPText), else "". A string shares the request's bytes,
	// which stay as they are: keeping it costs no copy.
	text string
	// part is the unmasked address as a key part ("39:2001:db8::1") for an address not
	// written in canonical form, rendered by the first rule that needs it; partLen is 0 until
	// then. An IPv6 address has at most 39 characters.
	part    [48]byte
	partLen uint8
}

// Reset empties the cache for another request. Only its valid flag is cleared: ClientIP reads
// nothing else before it has filled the cache, which sets every other field that is read.
// Zeroing the whole cache would be code of its own, with a call, on every request.
func (m *ClientIPCache) Reset() { m.valid = false }

// forwardedFor parses the trustedHops-th entry from the right of X-Forwarded-For, as
// parseIPText reports it; ok is false when there is no such entry or it is not an IP address
// (out of line: most configurations trust no hop).
func forwardedFor(req Request, trustedHops int) (ip netip.Addr, text string, ok bool) {
	if xff, found := req.Header("x-forwarded-for"); found {
		if entry, found := nthFromRight(xff, trustedHops); found {
			return parseIPText(entry)
		}
	}
	return netip.Addr{}, "", false
}

// nthFromRight returns the n-th (1-based) comma-separated entry of s counted from the
// right, or false when s has fewer entries. Empty entries count, as in Envoy.
func nthFromRight(s string, n int) (string, bool) {
	for k := 1; ; k++ {
		i := strings.LastIndexByte(s, ',')
		if k == n {
			return s[i+1:], true
		}
		if i < 0 {
			return "", false
		}
		s = s[:i]
	}
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// queryParams returns the raw (still percent-encoded) values of the first and the last query
// parameter whose decoded name is name, and how many there are. A parameter without "=" has
// the empty value.
func queryParams(path, name string) (first, last string, n int) {
	i := strings.IndexByte(path, '?')
	if i < 0 {
		return "", "", 0
	}
	q := path[i+1:]
	if j := strings.IndexByte(q, '#'); j >= 0 {
		q = q[:j]
	}
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(pair, "=")
		if unescapedEqual(k, name) {
			if n == 0 {
				first = v
			}
			last = v
			n++
		}
	}
	return first, last, n
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// nextUnescaped decodes one byte of a query component at s[i]: "+" is a space and "%XX" a
// byte; a "%" not followed by two hex digits is kept as it is (as browsers and most
// servers do) rather than rejected. It returns the byte and the index after it.
func nextUnescaped(s string, i int) (byte, int) {
	switch c := s[i]; c {
	case '+':
		return ' ', i + 1
	case '%':
		if i+2 < len(s) {
			if h, l := unhex(s[i+1]), unhex(s[i+2]); h >= 0 && l >= 0 {
				return byte(h<<4 | l), i + 3
			}
		}
		return c, i + 1
	default:
		return c, i + 1
	}
}

func unescapedLen(s string) int {
	n := 0
	for i := 0; i < len(s); n++ {
		_, i = nextUnescaped(s, i)
	}
	return n
}

func appendUnescaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		var c byte
		c, i = nextUnescaped(s, i)
		dst = append(dst, c)
	}
	return dst
}

// unescapedEqual reports whether the query component enc decodes to want, without
// allocating.
func unescapedEqual(enc, want string) bool {
	j := 0
	for i := 0; i < len(enc); {
		var c byte
		c, i = nextUnescaped(enc, i)
		if j >= len(want) || want[j] != c {
			return false
		}
		j++
	}
	return j == len(want)
}
