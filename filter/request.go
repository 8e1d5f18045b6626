package filter

import (
	"strconv"
	"unsafe"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
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

// clearHeaders empties the header cache (out of line, see doc.go).
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

// decideRequest is OnHttpRequestHeaders without its deferred recover, which the compiler would
// write out at each of its many returns (see doc.go).
func (h *httpContext) decideRequest() types.Action {
	p := h.plugin
	req := &p.req
	req.reset()
	// Removing the shadow rules' request headers makes the filter read the header map again:
	// each header's lines are then kept as first answered (see request.lines).
	req.keepLines = len(p.shadowHeaders) > 0
	p.skipped = p.skipped[:0]
	p.matched = p.cfg.MatchSkipped(req, p.matched[:0], &p.skipped)
	if len(p.skipped) > 0 {
		p.countSkipped()
	}
	if len(p.shadowHeaders) > 0 {
		p.removeShadowHeaders()
	}
	if len(p.matched) == 0 {
		return types.ActionContinue
	}
	// A matched rule whose key header (or query parameter) the request repeats under
	// on_duplicate "reject" refuses it before any rule is decided (duplicateKeyHeader). With
	// one matched rule, its key fails for such a request and decideFrom checks it; with
	// several, every rule is checked here first.
	if len(p.matched) > 1 && h.refuseDuplicateKeyHeader() {
		return types.ActionPause
	}
	now := p.now()
	h.startedAt = now
	h.d = p.takeDecisions()

	// Phase 1: decide every local rule, writing nothing. This loop serves the common case
	// (local, with a key, no overrides, lease, enforce_percent or usage); at the first rule
	// that needs more it hands the rest to decideFrom, so that a VM's first request of a plain
	// configuration compiles this loop alone (see doc.go).
	var key []byte
	var ok bool
	var built *config.Rule // the rule key was built for
	for i, r := range p.matched {
		rs := p.rules[r.Index]
		// Rules with the same key parts (one client over several windows) share the key built
		// for the previous one: building it costs about a microsecond in a Wasm VM.
		if built == nil || !r.SameKey(built) {
			key, ok = r.AppendKey(p.key[:0], req)
			p.key, built = key[:0], r
		}
		if !ok || len(key) > p.cfg.MaxKeyBytes || rs.overrides != nil || rs.lease != nil || r.Scope == config.ScopeGlobal || rs.unenforced != nil || rs.usage != nil {
			return h.decideFrom(i, now, key, ok, built)
		}
		a := h.d.add(rs)
		a.cost = r.Cost(req)
		if h.decideShared(a, key, now, a.cost) {
			return h.denyLocal(i, now, key, built)
		}
	}
	return h.finish()
}

// decideFrom is phase 1 of decideRequest from its i-th matched rule on, for every kind of
// rule; key, ok and built are decideRequest's key state on arrival.
func (h *httpContext) decideFrom(i int, now int64, key []byte, ok bool, built *config.Rule) types.Action {
	p := h.plugin
	req := &p.req
	globals := 0
	for j, r := range p.matched[i:] {
		rs := p.rules[r.Index]
		if built == nil || !r.SameKey(built) {
			key, ok = r.AppendKey(p.key[:0], req)
			p.key, built = key[:0], r
		}
		if !ok {
			// A single matched rule's repeated key part is refused here, before anything is
			// decided or counted: the working set goes back unused.
			if len(p.matched) == 1 && r.RepeatsKeyPart(req) && h.duplicateKeyHeader(r) {
				p.giveDecisions(h)
				return types.ActionPause
			}
			rs.noKey(r, req)
			continue
		}
		if len(key) > p.cfg.MaxKeyBytes {
			if h.keyTooLong(r, len(key)) {
				return types.ActionPause
			}
			continue
		}
		if rs.unenforced != nil {
			rs = p.enforcing(rs)
		}
		if rs.overrides != nil {
			if rs = rs.overrideFor(r, key); rs == nil {
				continue // an unlimited override: the rule lets the request through untouched
			}
		}
		a := h.d.add(rs)
		a.cost = r.Cost(req)
		if r.Scope == config.ScopeGlobal {
			action, denied, callout := h.prepareGlobal(a, r, key, now)
			if denied {
				return action
			}
			if callout {
				globals++
			}
			continue
		}
		if rs.usage != nil {
			a.keepKey(key) // for the settlement (see usage.go)
		}
		if h.decideLocal(a, key, now, a.cost) {
			return h.denyLocal(i+j, now, key, built)
		}
	}
	if globals == 0 {
		return h.finish()
	}
	return h.decideGlobal(now)
}

// The functions below are the parts of OnHttpRequestHeaders that only some configurations
// or a rare path need, each out of line (see doc.go).

// removeShadowHeaders removes the shadow rules' request headers from the request.
func (p *plugin) removeShadowHeaders() {
	for _, name := range p.shadowHeaders {
		// A client's own copy would read to the upstream as a shadow rule's verdict.
		if err := abi.RemoveHttpRequestHeader(name); err != nil {
			abi.LogDebug("ratelimit: removing request header " + name + ": " + err.Error())
		}
	}
	// A header map read while matching still holds the client's copies: a header first read
	// from now on must be the request as it now is, as a host call would answer.
	p.req.forgetHeaderMap()
}

// countSkipped counts the rules whose conditions held but whose key the request lacks
// (config.Config.MatchSkipped).
//
//go:noinline
func (p *plugin) countSkipped() {
	for _, r := range p.skipped {
		p.rules[r.Index].m.skipped.Increment(1)
	}
}

// noKey counts a matched rule that has no key for the request (skipped). A shadow rule's
// repeated key header or query parameter was counted once already, in duplicate_header.
func (rs *ruleState) noKey(r *config.Rule, req *request) {
	if _, dup := r.DuplicatePart(req); !dup || !r.Shadow {
		rs.m.skipped.Increment(1)
	}
}

// overrideFor returns the state of the override of rs that key selects, rs itself when none
// does, or nil for an unlimited override (counted as allowed by the rule).
func (rs *ruleState) overrideFor(r *config.Rule, key []byte) *ruleState {
	j := r.OverrideFor(key)
	if j < 0 {
		return rs
	}
	if rs.overrides[j] == nil {
		rs.m.allowed.Increment(1)
		return nil
	}
	return rs.overrides[j]
}

// refuseDuplicateKeyHeader asks duplicateKeyHeader about each of several matched rules that
// repeats a key part, and reports whether one refused the request.
func (h *httpContext) refuseDuplicateKeyHeader() bool {
	p := h.plugin
	for _, r := range p.matched {
		if r.RepeatsKeyPart(&p.req) && h.duplicateKeyHeader(r) {
			return true
		}
	}
	return false
}

// duplicateKeyHeader answers 400 when the matched rule r keys on a header or query parameter
// the request carries more than once, with on_duplicate "reject" (config.Rule.DuplicatePart),
// before any rule is decided, and reports whether it did. Such a request has no unambiguous
// key: the filter would count one value while the upstream may read another, and a client
// rotating the counted one would never reach its limit. A shadow rule only counts it (in
// duplicate_header) and skips it, as a request without its key header.
func (h *httpContext) duplicateKeyHeader(r *config.Rule) (refused bool) {
	kp, dup := r.DuplicatePart(&h.plugin.req)
	if !dup {
		return false
	}
	rs := h.plugin.rules[r.Index]
	rs.m.duplicateHeader.Increment(1)
	if r.Shadow {
		return false
	}
	h.finished = true
	errName, field, what := "duplicate_header", "header", " header"
	if kp.Source == config.SourceQuery {
		errName, field, what = "duplicate_query_parameter", "parameter", " query parameter"
	}
	body := []byte(`{"error":"` + errName + `","rule":"` + r.Name + `","` + field + `":"` + kp.Name +
		`","message":"the request carries the ` + kp.Name + what + ` more than once; send it once"}`)
	headers := [][2]string{{"content-type", "application/json"}}
	if err := abi.SendHttpResponse(400, headers, body, -1); err != nil {
		abi.LogError("ratelimit: rule " + strconv.Quote(r.Name) + ": sending the local response: " + err.Error())
	}
	return true
}

// keyTooLong answers 431 for a request whose key for the matched rule r is n bytes, longer
// than max_key_bytes, and reports whether it did; a shadow rule only counts and skips it.
// Refusing bounds what a key costs: a prefix of the value would merge every client sharing it
// (bearer tokens of one issuer), and a hash of it costs time in its length (SipHash of 60 KiB
// takes about 40 us in a Wasm VM).
func (h *httpContext) keyTooLong(r *config.Rule, n int) (refused bool) {
	p := h.plugin
	p.rules[r.Index].m.keyTooLong.Increment(1)
	if r.Shadow {
		return false
	}
	h.finished = true
	h.refundLeases()
	p.giveDecisions(h)
	limit := strconv.Itoa(p.cfg.MaxKeyBytes)
	body := []byte(`{"error":"key_too_long","rule":"` + r.Name + `","max_key_bytes":` + limit +
		`,"message":"the request's key for this rule is ` + strconv.Itoa(n) + ` bytes, more than ` + limit +
		`; send shorter key headers or parameters"}`)
	headers := [][2]string{{"content-type", "application/json"}}
	if err := abi.SendHttpResponse(431, headers, body, -1); err != nil {
		abi.LogError("ratelimit: rule " + strconv.Quote(r.Name) + ": sending the local response: " + err.Error())
	}
	return true
}
