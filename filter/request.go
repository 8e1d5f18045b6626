package filter

import (
	"strconv"
	"unsafe"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// request is the filter's view of the current request, implementing config.Request over
// proxy-wasm host calls. Every attribute is fetched at most once and only when a rule asks
// for it: each host call crosses the VM boundary, and most rules need two or three attributes.
type request struct {
	fetched uint8
	sample  uint32 // the request's enforcement sample, once fetchedSample is set
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
	fetchedSample // the enforcement sample (see enforce.go)
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

// clearHeaders empties the header cache (out of line, see doc.go: most configurations never
// cache a header here).
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

// decideRequest is OnHttpRequestHeaders without its deferred recover. The compiler writes the
// deferred call out at every return of a function that defers one, and deciding has many
// returns: kept apart, the recover is written once, which keeps the code a VM's first request
// compiles smaller (see doc.go).
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
	// on_duplicate "reject" refuses it (see duplicateKeyHeader), before any rule is decided.
	// With one matched rule (the usual case) the rule's key, built first thing below, fails
	// for exactly such a request, and decideFrom then checks it; with several, every rule
	// is checked here first, out of line.
	if len(p.matched) > 1 && h.refuseDuplicateKeyHeader() {
		return types.ActionPause
	}
	now := p.now()
	h.startedAt = now
	h.d = p.takeDecisions()

	// Phase 1: decide every local rule, writing nothing. This loop serves the rules of the
	// common case (local, without overrides or a lease block, with a key); at the first rule
	// that needs more it hands the rest of the request to decideFrom, so that a VM's first
	// request of a plain configuration compiles this loop alone, not the branches of the
	// others (see doc.go).
	var key []byte
	var ok bool
	var built *config.Rule // the rule key was built for
	for i, r := range p.matched {
		rs := p.rules[r.Index]
		// Rules with the same key parts (one client limited over several windows) share
		// the key built for the previous one: building it costs about a microsecond in a
		// Wasm VM.
		if built == nil || !r.SameKey(built) {
			key, ok = r.AppendKey(p.key[:0], req)
			p.key, built = key[:0], r
		}
		if !ok || len(key) > p.cfg.MaxKeyBytes || rs.general {
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
// rule (no key, a key over max_key_bytes, an override, a lease block, a global rule); key, ok
// and built are decideRequest's key state on arrival. Out of line, as decideRequest explains.
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
			// A single matched rule's repeated key part is refused here (decideRequest
			// checks several rules before deciding any). Nothing has been decided or
			// counted yet: the request's working set goes back unused.
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
// (shadow request headers, overrides, global rules) or a rare path need, each out of line
// (see doc.go).

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

// countSkipped counts, in each rule's skipped, the rules whose conditions held for the request
// but whose key it lacks (config.Config.MatchSkipped). Out of line (see doc.go).
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
// does, or nil for an unlimited override (the request is then counted as allowed by the rule).
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

// refuseDuplicateKeyHeader asks duplicateKeyHeader about each matched rule that repeats a key
// part, for a request that matched several rules, and reports whether one refused the request
// (out of line, see doc.go).
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
// duplicate_header) and skips it, as a request without its key header. Out of line (see
// doc.go).
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
	body := append(append(append(append(append(append(append([]byte(nil),
		`{"error":"`...), errName...), `","rule":"`...), r.Name...), `","`...), field...), `":"`...)
	body = append(append(append(append(append(body, kp.Name...), `","message":"the request carries the `...), kp.Name...),
		what...), ` more than once; send it once"}`...)
	headers := [][2]string{{"content-type", "application/json"}}
	if err := abi.SendHttpResponse(400, headers, body, -1); err != nil {
		abi.LogError("ratelimit: rule " + strconv.Quote(r.Name) + ": sending the local response: " + err.Error())
	}
	return true
}

// keyTooLong answers 431 for a request whose key for the matched rule r is n bytes, longer
// than max_key_bytes, and reports whether it did; a shadow rule only counts and skips it.
// Refusing bounds what a key costs: it is neither digested nor stored, and no rule is charged.
// A prefix of the value would merge every client sharing it (bearer tokens of one issuer), and
// a hash of the whole value still costs time in its length (SipHash of 60 KiB takes about
// 40 us in a Wasm VM). Out of line (see doc.go).
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
	body := append(append(append(append(append(append(append([]byte(nil),
		`{"error":"key_too_long","rule":"`...), r.Name...), `","max_key_bytes":`...), limit...),
		`,"message":"the request's key for this rule is `...), strconv.Itoa(n)...), ` bytes, more than `...)
	body = append(append(body, limit...), `; send shorter key headers or parameters"}`...)
	headers := [][2]string{{"content-type", "application/json"}}
	if err := abi.SendHttpResponse(431, headers, body, -1); err != nil {
		abi.LogError("ratelimit: rule " + strconv.Quote(r.Name) + ": sending the local response: " + err.Error())
	}
	return true
}
