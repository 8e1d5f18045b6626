package filter

import (
	"unsafe"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// request is the filter's view of the current request, implementing config.Request over
// proxy-wasm host calls. Every attribute is fetched at most once and only when a rule asks
// for it: each host call crosses the VM boundary, and most rules need two or three attributes.
type request struct {
	fetched uint8
	method  string
	path    string
	route   string
	vhost   string
	source  string
	// headers caches single-header lookups; a request touches few distinct headers, so a
	// short slice beats a map.
	headers []cachedHeader
	// clientIP keeps the client IP once a rule has parsed it (see config.ClientIP).
	clientIP config.ClientIPCache
	// hmap is the request's whole header map once it has been read (mapRead; mapOK if the
	// host returned it). A key header's lines and X-Forwarded-For need it, and once it is
	// here every other header read of the request (:method, :path, match conditions, cost
	// headers) is answered from it: Envoy's single-value lookup answers the first line of a
	// header, which is what the map holds first, so the filter observes the same values with
	// fewer host calls.
	hmap           abi.HeaderMap
	mapRead, mapOK bool
	// preferMap is set by the plugin when its rules read the whole map on most requests (a
	// header key part, or a client IP taken from X-Forwarded-For): the first header read of a
	// request then reads the map rather than one value, so that the reads before the key
	// part's (the rule's conditions) do not each cost a host call of their own.
	preferMap bool
	// lines is HeaderLines' last answer, for the header linesName, once linesRead is set. One
	// answer, not one per header in the headers cache: a request asks for the lines of its key
	// header two or three times in a row (the duplicate check, then the key), and a header
	// whose answer was replaced is scanned again in the map already read, without a host call,
	// which answers the same. That holds while the map is the one read first: keepLines (set
	// for a configuration with shadow request headers, whose removal makes the filter read the
	// map again) and a host that refused the map keep each header's answer in its headers
	// entry instead, so that a header answered once keeps its answer (see cachedLines).
	linesName, linesFirst, linesLast string
	lines                            int
	linesRead, keepLines             bool
}

type cachedHeader struct {
	name, value string
	ok          bool
	valueRead   bool // value and ok hold Header's answer
	// first, last and lines are HeaderLines' answer, once linesRead is set (see cachedLines).
	first, last string
	lines       int
	linesRead   bool
}

const (
	fetchedMethod = 1 << iota
	fetchedPath
	fetchedRoute
	fetchedVHost
	fetchedSource
)

// reset forgets the last request. Each cached attribute is marked unread (fetched, linesRead,
// mapRead, the client IP cache's Reset) rather than cleared: each is read only once its mark
// is set again, and clearing the strings and the map would be stores with write barriers, in
// code a VM's first request compiles. They keep the last request's bytes (its
// header map and a few attributes) alive until they are replaced.
func (r *request) reset() {
	if len(r.headers) > 0 {
		r.clearHeaders()
	}
	r.fetched, r.linesRead, r.mapRead = 0, false, false
	r.clientIP.Reset()
}

// clearHeaders empties the header cache. It is kept out of reset's line (see doc.go): most
// configurations (a header key part reads the header map, not this cache) never cache a
// header here.
//
//go:noinline
func (r *request) clearHeaders() {
	// Entry by entry, last first, not clear(r.headers): the compiler turns both that and a
	// forward loop into a call of runtime.memclrHasPointers, which costs about 0.3 us in a
	// Wasm VM for the one or two entries a request caches. The entries are cleared rather than
	// only cut off, so that their strings do not keep the last request's buffers alive.
	for i := len(r.headers) - 1; i >= 0; i-- {
		r.headers[i] = cachedHeader{}
	}
	r.headers = r.headers[:0]
}

// Header returns a request header. Envoy's single-value lookup returns only the first of
// several header lines, so x-forwarded-for, where the right-most entries are the trusted
// ones, is read from the full header map and its lines are joined.
func (r *request) Header(name string) (string, bool) {
	c := r.cached(name)
	if c.valueRead {
		return c.value, c.ok
	}
	switch {
	case name == "x-forwarded-for":
		if m, ok := r.headerMap(); ok {
			c.value, c.ok = m.Joined(name)
		}
	case c.linesRead:
		// The header's lines were already read from the full header map (a key header's
		// duplicate check runs before its key is built), and Envoy's single-value lookup
		// answers the first of them: reading it again would cost a host call and an
		// allocator re-entry for the same bytes.
		c.value, c.ok = c.first, c.lines > 0
	case r.mapRead || r.preferMap:
		if m, ok := r.headerMap(); ok {
			first, _, n := m.Lines(name)
			c.value, c.ok = first, n > 0
			break
		}
		// A host that refused the map is asked for the value alone, as without the map.
		fallthrough
	default:
		v, err := abi.GetHttpRequestHeader(name)
		c.value, c.ok = v, err == nil
	}
	c.valueRead = true
	return c.value, c.ok
}

// forgetHeaderMap drops the header map read so far, after the filter changed the request's
// headers: the next read reads the host's map again. Headers already answered keep their
// answers.
func (r *request) forgetHeaderMap() {
	r.hmap, r.mapRead, r.mapOK = abi.HeaderMap{}, false, false
}

// headerMap returns the request's whole header map, reading it from the host the first time.
func (r *request) headerMap() (abi.HeaderMap, bool) {
	if !r.mapRead {
		var err error
		r.hmap, err = abi.GetHttpRequestHeaderMap()
		r.mapRead, r.mapOK = true, err == nil
	}
	return r.hmap, r.mapOK
}

// cached returns the cache entry for a header, adding an empty one the first time.
func (r *request) cached(name string) *cachedHeader {
	for i := range r.headers {
		if sameString(r.headers[i].name, name) {
			return &r.headers[i]
		}
	}
	r.headers = append(r.headers, cachedHeader{name: name})
	return &r.headers[len(r.headers)-1]
}

// HeaderLines returns the first and last line of a request header and how many lines the
// request carries. Envoy's single-value lookup (Header) sees only the first line, so the lines
// are counted in the full header map, once per request and header; key parts use it to refuse
// or resolve a repeated key header (see config.Rule.DuplicatePart). Headers that Envoy
// indexes inline arrive already folded into one line joined by ",", and count as one.
func (r *request) HeaderLines(name string) (first, last string, n int) {
	if r.linesRead && sameString(r.linesName, name) {
		return r.linesFirst, r.linesLast, r.lines
	}
	// r.headerMap(), written out: it is not inlined, and a VM's first request would compile
	// it as a function of its own (see doc.go).
	if !r.mapRead {
		var err error
		r.hmap, err = abi.GetHttpRequestHeaderMap()
		r.mapRead, r.mapOK = true, err == nil
	}
	m, ok := r.hmap, r.mapOK
	if !ok || r.keepLines {
		return r.cachedLines(name)
	}
	r.linesName, r.linesRead = name, true
	r.linesFirst, r.linesLast, r.lines = m.Lines(name)
	return r.linesFirst, r.linesLast, r.lines
}

// cachedLines is HeaderLines keeping each header's answer in its headers entry, for a request
// whose header map may be read again (keepLines) or that the host refused: a header answered
// once then keeps its answer, and Header answers its first line from it. It is kept out of
// HeaderLines' line (see doc.go): a VM's first request of a configuration without shadow
// request headers needs none of it.
//
//go:noinline
func (r *request) cachedLines(name string) (first, last string, n int) {
	c := r.cached(name)
	if !c.linesRead {
		if m, ok := r.headerMap(); ok {
			c.first, c.last, c.lines = m.Lines(name)
		}
		c.linesRead = true
	}
	return c.first, c.last, c.lines
}

// ClientIPCache returns the request's client IP cache: the filter parses the client IP once
// per request, however many rules use it.
func (r *request) ClientIPCache() *config.ClientIPCache { return &r.clientIP }

// Method returns :method.
func (r *request) Method() string {
	if r.fetched&fetchedMethod == 0 {
		r.fetched |= fetchedMethod
		r.method, _ = r.Header(":method")
	}
	return r.method
}

// Path returns :path, query string included.
func (r *request) Path() string {
	if r.fetched&fetchedPath == 0 {
		r.fetched |= fetchedPath
		r.path, _ = r.Header(":path")
	}
	return r.path
}

// Route returns the xds.route_name property: the name of the Envoy route that matched.
func (r *request) Route() string { return r.property(fetchedRoute, &r.route, routeNamePath) }

// VirtualHost returns the xds.virtual_host_name property.
func (r *request) VirtualHost() string {
	return r.property(fetchedVHost, &r.vhost, virtualHostPath)
}

// SourceAddress returns the source.address property ("ip:port") of the downstream connection.
func (r *request) SourceAddress() string {
	// r.property, written out: it is not inlined, and every rule keyed on the client IP reads
	// the source address, so a VM's first request would compile it as a function of its own
	// (see doc.go).
	if r.fetched&fetchedSource == 0 {
		r.fetched |= fetchedSource
		r.source = property(sourceAddressPath)
	}
	return r.source
}

// property reads a host property into *dst the first time bit is asked for.
func (r *request) property(bit uint8, dst *string, path abi.PropertyPath) string {
	if r.fetched&bit == 0 {
		r.fetched |= bit
		*dst = property(path)
	}
	return *dst
}

// Property paths, encoded by the compiler (see abi.PropertyPath).
const (
	routeNamePath     abi.PropertyPath = "xds\x00route_name"
	virtualHostPath   abi.PropertyPath = "xds\x00virtual_host_name"
	sourceAddressPath abi.PropertyPath = "source\x00address"
)

// property reads a host property; a property the host does not have reads as "".
func property(path abi.PropertyPath) string {
	v, err := abi.GetPropertyPath(path)
	if err != nil {
		return ""
	}
	return v
}

// sameString reports whether a == b, comparing the bytes only when the two do not share them.
// The header names a request asks for come from the configuration, so the name cached and the
// name asked for are nearly always the same string, and comparing their bytes would cost a
// call of runtime.memequal in a Wasm VM.
func sameString(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}
