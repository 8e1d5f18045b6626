package filter

import (
	"unsafe"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// request is the filter's view of the current request, implementing config.Request over
// proxy-wasm host calls. Every attribute is fetched at most once, when a rule first asks.
type request struct {
	fetched uint8
	sample  uint32 // the request's enforcement sample, once fetchedSample is set
	method  string
	path    string
	route   string
	vhost   string
	source  string
	// headers caches single-header lookups: a short slice, for the few headers a request reads.
	headers []cachedHeader
	// clientIP keeps the client IP once a rule has parsed it (see config.ClientIP).
	clientIP config.ClientIPCache
	// hmap is the request's whole header map once read (mapRead; mapOK if the host returned
	// it). A key header's lines and X-Forwarded-For need it; once here, every other header read
	// is answered from it: the same first line Envoy's single-value lookup answers, with fewer
	// host calls.
	hmap           abi.HeaderMap
	mapRead, mapOK bool
	// preferMap is set when the rules read the whole map on most requests (readsHeaderMap):
	// the first header read then reads the map, so that the reads before the key part's (the
	// rule's conditions) do not each cost a host call.
	preferMap bool
	// lines is HeaderLines' last answer, for the header linesName, once linesRead is set. One
	// answer, not one per header: a request asks for its key header's lines two or three times
	// in a row, and a header whose answer was replaced is scanned again in the map already
	// read, which answers the same. Where the map may be read again (keepLines: shadow request
	// headers are removed) or was refused, each header keeps its answer in its headers entry
	// instead (see cachedLines).
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
	fetchedSample // the enforcement sample (see enforce.go)
)

// reset forgets the last request. Each cached attribute is marked unread rather than cleared:
// clearing the strings and the map would be stores with write barriers, in code a VM's first
// request compiles. They keep the last request's bytes alive until they are replaced.
func (r *request) reset() {
	if len(r.headers) > 0 {
		r.clearHeaders()
	}
	r.fetched, r.linesRead, r.mapRead = 0, false, false
	r.clientIP.Reset()
}

// clearHeaders empties the header cache, so that the next request reads its headers anew.
func (r *request) clearHeaders() {
	// Entry by entry, last first: clear(r.headers) and a forward loop both become a call of
	// runtime.memclrHasPointers, about 0.3 us in a Wasm VM for the one or two entries. Cleared,
	// not only cut off, so that their strings do not keep the last request's buffers alive.
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
		// The header's lines were already read from the map (a key header's duplicate
		// check): the single-value lookup would answer the first of them again.
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
// headers; headers already answered keep their answers.
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
// request carries, counted in the full header map (Header sees only the first); key parts use
// it for a repeated key header (see config.Rule.DuplicatePart). Headers that Envoy indexes
// inline arrive folded into one line joined by ",", and count as one.
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

// cachedLines is HeaderLines keeping each header's answer in its headers entry (see
// request.lines), out of HeaderLines' line (see doc.go).
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

// ClientIPCache returns the request's client IP cache, so it is parsed once per request.
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
func (r *request) VirtualHost() string { return r.property(fetchedVHost, &r.vhost, virtualHostPath) }

// SourceAddress returns the source.address property ("ip:port") of the downstream connection.
func (r *request) SourceAddress() string {
	// r.property, written out: it is not inlined, and every rule keyed on the client IP reads
	// the source address (see doc.go).
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

// sameString reports whether a == b, comparing the bytes only when the two do not share them:
// the header names asked for come from the configuration, so they nearly always do, and
// comparing bytes costs a call of runtime.memequal in a Wasm VM.
func sameString(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}
