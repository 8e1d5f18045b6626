package wasmhost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Request is one HTTP request to run through the filter with Do.
type Request struct {
	// Worker selects the worker VM; -1 picks one round robin.
	Worker int
	// Method, Path and Authority become :method, :path and :authority
	// (defaults GET, / and localhost). Scheme defaults to http.
	Method, Path, Authority, Scheme string
	// Headers are the other request headers (keys are lower-cased, as by
	// Envoy's codec). x-request-id and x-forwarded-proto are added when
	// missing, like Envoy's connection manager does.
	Headers [][2]string
	// Body and Trailers, when non-empty, produce proxy_on_request_body (one
	// chunk) and proxy_on_request_trailers.
	Body     []byte
	Trailers [][2]string
	// RouteName, VirtualHost, ClusterName and RouteMetadata are the xds.*
	// properties of the matched route.
	RouteName, VirtualHost, ClusterName string
	RouteMetadata                       []byte
	// SourceAddress is the downstream address "ip:port" (default
	// 127.0.0.1:50000).
	SourceAddress string
	// Upstream is the response the upstream gives if the request continues
	// (default 200 with no body). It goes through the response callbacks.
	Upstream *UpstreamResponse
}

// UpstreamResponse is a response as it arrives from the upstream.
type UpstreamResponse struct {
	Status   int         // becomes :status
	Headers  [][2]string // the other headers; pseudo-headers here are ignored
	Body     []byte      // delivered in one proxy_on_response_body chunk when non-empty
	Trailers [][2]string // delivered by proxy_on_response_trailers when non-empty
	// Chunks, when Body is empty, is a body that streams: each chunk is delivered in a
	// proxy_on_response_body of its own, the last one with end_of_stream (unless Trailers
	// follow or Cut is set), ChunkDelay apart on the host's time (Options.VirtualClock when
	// set). A client whose ctx ends between two chunks goes away mid-stream, as a downstream
	// reset does in Envoy. Only Do honours ChunkDelay.
	Chunks     [][]byte
	ChunkDelay time.Duration
	// Cut makes the upstream reset the stream after its last chunk: the body never ends
	// (no end_of_stream), and Result.Truncated is set.
	Cut bool
	// Live, when set (and Body and Chunks are not), is a body read as it arrives, each Read
	// a chunk of its own; Do's caller (or ServeRoute's client) is handed each chunk as the
	// filter passes it (see downstream). A read error other than io.EOF cuts the stream.
	// run closes it.
	Live io.ReadCloser
	// Delay is how long the upstream takes to answer, on the host's time
	// (Options.VirtualClock when set): Do holds the response back that long
	// after the request continued. Only Do honours it.
	Delay time.Duration
}

// wholeBody returns the response's body: Body, its Chunks joined, or its Live body read to
// the end (and closed).
func (u *UpstreamResponse) wholeBody() []byte {
	if len(u.Body) == 0 && len(u.Chunks) == 0 && u.Live != nil {
		b, _ := io.ReadAll(u.Live)
		u.Live.Close()
		return b
	}
	if len(u.Body) > 0 || len(u.Chunks) == 0 {
		return u.Body
	}
	var b []byte
	for _, c := range u.Chunks {
		b = append(b, c...)
	}
	return b
}

// LocalResponse is a response Envoy generated instead of the upstream's:
// by proxy_send_local_response or by a VM failure (503 wasm_fail_stream).
type LocalResponse struct {
	Status     int         // the HTTP status
	Headers    [][2]string // as the guest passed them (lower-cased)
	Body       []byte      // the body as the guest passed it
	Details    string      // response code details (whitespace replaced by '_')
	GrpcStatus int32       // -1 when not set
}

// Result is what happened to a stream.
type Result struct {
	Worker   int    // the worker VM that ran the stream
	StreamID uint32 // the stream's context id on that VM
	// Continued is true when the request reached the upstream.
	Continued bool
	// ContinuedAt is the host's time (Options.Clock) at which the request
	// went upstream; zero when it did not. With a VirtualClock it is exact:
	// a request a tick released carries that tick's instant.
	ContinuedAt time.Time
	// RequestHeaders and RequestBody are the request as the filter left it
	// (what the upstream received when Continued).
	RequestHeaders [][2]string
	RequestBody    []byte
	// Local is set when Envoy sent a local response instead of (or in place
	// of) the upstream's.
	Local *LocalResponse
	// Status, ResponseHeaders and ResponseBody are the response sent
	// downstream, after the filter's response-side changes.
	Status          int
	ResponseHeaders [][2]string
	ResponseBody    []byte
	// Reset is true when the guest closed the stream (proxy_close_stream):
	// the downstream sees a reset, not a response.
	Reset bool
	// Truncated is true when the upstream reset a streamed body before its end
	// (UpstreamResponse.Cut): the downstream got the headers and part of the body.
	Truncated bool
	// StreamedHeaders and StreamedBytes say what of the response was handed to a downstream
	// while a live body streamed (UpstreamResponse.Live): the headers, and the first
	// StreamedBytes of ResponseBody.
	StreamedHeaders bool
	StreamedBytes   int
	// Failed is true when the VM failed during (or before) this stream.
	Failed bool
	// FilterState holds what the filter set with proxy_set_property, by path: Envoy keeps
	// each in the stream's filter state under "wasm." and the path, where its access log's
	// %FILTER_STATE(wasm.<path>:PLAIN)% reads it.
	FilterState map[string][]byte
}

// Header returns the first value of a response header.
func (r *Result) Header(key string) string { return headerValue(r.ResponseHeaders, key) }

// RequestHeader returns the first value of a request header as the filter
// left it.
func (r *Result) RequestHeader(key string) string { return headerValue(r.RequestHeaders, key) }

func headerValue(h [][2]string, key string) string {
	key = strings.ToLower(key)
	for _, p := range h {
		if p[0] == key {
			return p[1]
		}
	}
	return ""
}

// phase is where a stream is in Envoy's filter chain.
type phase int

const (
	phRequestHeaders phase = iota
	phRequestBody
	phRequestTrailers
	phRequestDone
	phWaitUpstream
	phResponseHeaders
	phResponseBody
	phResponseTrailers
	phComplete
)

type streamEvent struct {
	needUpstream bool
	needChunk    bool    // a streamed body waits for its next chunk (UpstreamResponse.ChunkDelay)
	request      *Result // snapshot when needUpstream
	// With needChunk, for a live body: what the filter passed downstream since the last
	// event, the response headers first (status and pairs, once), then body bytes.
	status  int
	headers [][2]string
	out     []byte
	done    bool
	result  *Result
	err     error
}

// stream is one HTTP stream's state on its VM; only the VM's loop touches it.
type stream struct {
	v   *vm
	id  uint32
	req *Request

	phase  phase
	paused bool

	maps      [4]*headerMap // request headers/trailers, response headers/trailers
	avail     [4]bool       // whether the guest can reach each map now
	body      [2][]byte     // request, response body
	bodyAvail [2]bool
	logPhase  bool // in proxy_on_log: Envoy exposes the maps read-only

	continueReq [2]bool
	closeReq    bool
	local       *LocalResponse
	localSent   bool
	isDirty     bool
	properties  map[string][]byte

	events chan streamEvent
	result Result
	done   bool

	// A streamed response body (UpstreamResponse.Chunks): the chunks, how many were
	// released to the filter and delivered, the body delivered so far, the delay between
	// two chunks, and whether the upstream cuts the stream after the last.
	chunks              [][]byte
	released, delivered int
	sent                []byte
	cut                 bool
	// A live body (UpstreamResponse.Live): whether it ended, and what was handed downstream
	// so far (the headers, and sent[:outBytes]).
	live, eof  bool
	headersOut bool
	outBytes   int
}

// dir is the direction the stream is in: streamRequest until the upstream answers, then
// streamResponse. It also indexes body, bodyAvail and filterCallbacks.
func (s *stream) dir() int {
	if s.phase <= phWaitUpstream {
		return streamRequest
	}
	return streamResponse
}

// markDirty queues the stream for settle(): host calls record deferred
// actions and the VM applies them after the callback returns, like Envoy's
// addAfterVmCallAction.
func (v *vm) markDirty(s *stream) {
	if !s.isDirty {
		s.isDirty = true
		v.dirty = append(v.dirty, s)
	}
}

// settle applies the deferred actions recorded during the last callback.
// If the VM failed, streams waiting on it (paused for a callout, say) get
// the FAIL_CLOSED reply now. Envoy would leave them paused until the stream
// idle timeout; answering at once keeps tests bounded.
func (v *vm) settle() {
	if v.failed.Load() {
		for _, s := range v.streams {
			if !s.done && !s.isDirty {
				v.markDirty(s)
			}
		}
	}
	for len(v.dirty) > 0 {
		s := v.dirty[0]
		v.dirty = v.dirty[1:]
		s.isDirty = false
		if !s.done {
			v.advance(s)
		}
	}
	v.dirty = v.dirty[:0]
}

// Do runs one request through the filter on a worker VM, the way Envoy's
// filter chain would: context create, request headers (waiting while the
// filter pauses, bounded by ctx), body, trailers, the upstream response
// (Request.Upstream) through the response callbacks, then on_log, on_done
// and on_delete. If ctx ends first the stream is torn down (as when the
// downstream resets) and ctx's error is returned.
func (h *Host) Do(ctx context.Context, r Request) (*Result, error) {
	up := r.Upstream
	if up == nil {
		up = &UpstreamResponse{Status: 200}
	}
	return h.run(ctx, &r, func(ctx context.Context, _ *Result) (*UpstreamResponse, error) {
		if err := h.sleep(ctx, up.Delay); err != nil {
			return nil, err
		}
		return up, nil
	}, nil)
}

// upstreamFunc produces the upstream response for a request that continued.
type upstreamFunc func(ctx context.Context, req *Result) (*UpstreamResponse, error)

// pick returns the worker VM a request names, or the next one round robin for a negative
// index. The modulo is taken on the unsigned counter, so that its wrap-around cannot make a
// negative index.
func (h *Host) pick(worker int) (*vm, error) {
	if worker < 0 {
		return h.vms[(h.rr.Add(1)-1)%uint64(len(h.vms))], nil
	}
	if worker >= len(h.vms) {
		return nil, fmt.Errorf("wasmhost: worker %d out of range (%d workers)", worker, len(h.vms))
	}
	return h.vms[worker], nil
}

// downstream receives what the filter passes of a response with a live body, as it passes it
// (see UpstreamResponse.Live): the headers (status and pairs, once, before any body byte),
// then body bytes. headers is nil when there are none to pass.
type downstream interface {
	pass(status int, headers [][2]string, body []byte)
}

func (h *Host) run(ctx context.Context, r *Request, upstream upstreamFunc, down downstream) (*Result, error) {
	select {
	case <-h.closed:
		return nil, ErrClosed
	default:
	}
	v, err := h.pick(r.Worker)
	if err != nil {
		return nil, err
	}
	s := &stream{v: v, req: r, events: make(chan streamEvent, 2)}
	if !v.post(ctx, func() { v.startStream(s) }) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, ErrClosed
	}
	// The upstream response's pacing, kept on this goroutine: the delay between two chunks,
	// or the live body it reads.
	var delay time.Duration
	var live io.ReadCloser
	defer func() {
		if live != nil {
			live.Close()
		}
	}()
	var buf []byte
	for {
		select {
		case ev := <-s.events:
			if ev.done {
				return ev.result, ev.err
			}
			if ev.needChunk {
				if down != nil && (ev.headers != nil || len(ev.out) > 0) {
					down.pass(ev.status, ev.headers, ev.out)
				}
				var next func()
				if live != nil {
					if buf == nil {
						buf = make([]byte, 32<<10)
					}
					n, err := live.Read(buf)
					data := append([]byte(nil), buf[:n]...)
					next = func() { v.pushChunk(s, data, err) }
				} else {
					if err := h.sleep(ctx, delay); err != nil {
						v.abortAndWait(s, err)
						return nil, err
					}
					next = func() { v.releaseChunk(s) }
				}
				if !v.post(ctx, next) {
					v.abortAndWait(s, ctx.Err())
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					return nil, ErrClosed
				}
				continue
			}
			resp, err := upstream(ctx, ev.request)
			if err != nil {
				v.abortAndWait(s, err)
				return nil, err
			}
			delay, live = resp.ChunkDelay, resp.Live
			if !v.post(ctx, func() { v.respond(s, resp) }) {
				v.abortAndWait(s, ctx.Err())
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, ErrClosed
			}
		case <-ctx.Done():
			v.abortAndWait(s, ctx.Err())
			// A stream that ended before the client went away (its done event still
			// queued when both were ready) returns its result: the client had it.
			for {
				select {
				case ev := <-s.events:
					if ev.done {
						return ev.result, ev.err
					}
					continue
				default:
				}
				return nil, ctx.Err()
			}
		case <-h.closed:
			return nil, ErrClosed
		}
	}
}

// startStream creates the stream context and runs the request side.
func (v *vm) startStream(s *stream) {
	select {
	case <-v.h.closed:
		// Close got here first: the root context is being torn down.
		s.done = true
		s.events <- streamEvent{done: true, err: ErrClosed}
		return
	default:
	}
	r := s.req
	s.id = v.allocID()
	s.result.Worker = v.idx
	s.result.StreamID = s.id
	v.streams[s.id] = s

	s.maps[MapRequestHeaders] = requestHeaders(r)
	s.body[0] = r.Body
	if len(r.Trailers) > 0 {
		s.maps[MapRequestTrailers] = newHeaderMap(r.Trailers)
	}
	v.callback("proxy_on_context_create", v.fn.onContextCreate, s.id, uint64(s.id), uint64(v.rootID))
	v.advance(s)
	v.settle()
}

// inlineRequestHeaders are the request headers Envoy's header map indexes inline
// (INLINE_REQ_HEADERS and INLINE_REQ_RESP_HEADERS in envoy/http/header_map.h), apart from the
// pseudo-headers, which a Request sets through its own fields. Repeated lines of these reach
// the filter folded into one value. Extensions and the bootstrap's inline_headers can
// register more; the host models the built-in list.
var inlineRequestHeaders = map[string]bool{
	"connection": true, "content-type": true, "x-envoy-decorator-operation": true, "keep-alive": true,
	"proxy-connection": true, "proxy-status": true, "x-request-id": true, "transfer-encoding": true,
	"upgrade": true, "via": true, "content-length": true, "x-envoy-attempt-count": true,
	"x-client-trace-id": true, "x-envoy-downstream-service-cluster": true,
	"x-envoy-downstream-service-node": true, "x-envoy-external-address": true, "x-envoy-force-trace": true,
	"x-envoy-hedge-on-per-try-timeout": true, "x-envoy-internal": true, "x-envoy-ip-tags": true,
	"x-envoy-retry-on": true, "x-envoy-retry-grpc-on": true, "x-envoy-retriable-status-codes": true,
	"x-envoy-retriable-header-names": true, "x-envoy-original-path": true, "x-envoy-original-url": true,
	"x-envoy-upstream-alt-stat-name": true, "x-envoy-upstream-rq-timeout-alt-response": true,
	"expect": true, "x-forwarded-client-cert": true, "x-forwarded-for": true, "x-forwarded-host": true,
	"x-forwarded-proto": true, "grpc-timeout": true, "te": true, "user-agent": true,
	"x-envoy-expected-rq-timeout-ms": true, "x-envoy-max-retries": true,
	"x-envoy-upstream-rq-timeout-ms": true, "x-envoy-upstream-rq-per-try-timeout-ms": true,
	"x-envoy-upstream-stream-duration-ms": true,
}

// requestHeaders builds the request headers Envoy's connection manager hands to the filter
// chain (and, with the filter disabled on the route, to the router): the pseudo-headers from
// r with their defaults, r's other headers (a Host header is :authority already), then
// x-forwarded-proto and x-request-id when the client sent none.
func requestHeaders(r *Request) *headerMap {
	scheme := orDefault(r.Scheme, "http")
	hm := newHeaderMap(nil)
	hm.add(":authority", orDefault(r.Authority, "localhost"))
	hm.add(":path", orDefault(r.Path, "/"))
	hm.add(":method", orDefault(r.Method, "GET"))
	hm.add(":scheme", scheme)
	for _, p := range r.Headers {
		k := strings.ToLower(p[0])
		if k == "host" || k == ":authority" || k == ":path" || k == ":method" || k == ":scheme" {
			continue
		}
		// Envoy's header map keeps each header it indexes inline in one entry and appends a
		// repeated line to it with "," (HeaderMapImpl::insertByKey), so the filter chain sees
		// one value; every other header keeps one entry per line.
		if inlineRequestHeaders[k] && hm.fold(k, p[1]) {
			continue
		}
		hm.add(k, p[1])
	}
	if _, ok := hm.get("x-forwarded-proto"); !ok {
		hm.add("x-forwarded-proto", scheme)
	}
	if _, ok := hm.get("x-request-id"); !ok {
		hm.add("x-request-id", newRequestID())
	}
	return hm
}

// advance runs the stream's state machine until it has to wait (paused by
// the filter, or for the upstream) or it is finished.
func (v *vm) advance(s *stream) {
	for !s.done {
		if v.failed.Load() {
			v.failStream(s)
			return
		}
		if s.closeReq {
			s.result.Reset = true
			v.finish(s)
			return
		}
		if s.local != nil && !s.localSent {
			v.startLocalReply(s)
			continue
		}
		if s.paused {
			d := s.dir()
			if !s.continueReq[d] {
				return
			}
			s.continueReq[d] = false
			s.paused = false
		}
		switch s.phase {
		case phRequestHeaders, phResponseHeaders:
			d := s.dir()
			hm := s.maps[headersMap(d)]
			eos := len(s.body[d]) == 0 && s.maps[trailersMap(d)] == nil && (d == streamRequest || s.chunks == nil)
			s.avail[headersMap(d)] = true
			r, ok := v.callback(filterCallbacks[d][cbHeaders], v.fn.filter[d][cbHeaders], s.id, uint64(s.id), uint64(hm.size()), boolArg(eos))
			s.phase++ // to the body
			v.afterFilterCall(s, ok, uint32(r), headersMap(d), -1)
		case phRequestBody, phResponseBody:
			d := s.dir()
			if d == streamResponse && s.chunks != nil {
				if !v.nextChunk(s) {
					return
				}
				continue
			}
			s.phase++ // to the trailers
			if len(s.body[d]) == 0 {
				continue
			}
			s.bodyAvail[d] = true
			eos := s.maps[trailersMap(d)] == nil
			r, ok := v.callback(filterCallbacks[d][cbBody], v.fn.filter[d][cbBody], s.id, uint64(s.id), uint64(len(s.body[d])), boolArg(eos))
			v.afterFilterCall(s, ok, uint32(r), -1, d)
		case phRequestTrailers, phResponseTrailers:
			d := s.dir()
			s.phase++ // to phRequestDone or phComplete
			tm := s.maps[trailersMap(d)]
			if tm == nil {
				continue
			}
			s.avail[trailersMap(d)] = true
			r, ok := v.callback(filterCallbacks[d][cbTrailers], v.fn.filter[d][cbTrailers], s.id, uint64(s.id), uint64(tm.size()))
			v.afterFilterCall(s, ok, uint32(r), trailersMap(d), -1)
		case phRequestDone:
			s.avail[MapRequestHeaders], s.avail[MapRequestTrailers], s.bodyAvail[0] = false, false, false
			s.phase = phWaitUpstream
			s.result.Continued = true
			s.result.ContinuedAt = v.h.clock()
			snap := s.snapshotRequest()
			s.events <- streamEvent{needUpstream: true, request: snap}
			return
		case phWaitUpstream:
			return
		case phComplete:
			v.finish(s)
			return
		}
	}
}

// headersMap and trailersMap are the map types of direction d's headers and trailers.
func headersMap(d int) int  { return MapRequestHeaders + 2*d }
func trailersMap(d int) int { return MapRequestTrailers + 2*d }

// afterFilterCall interprets a filter callback's return value. Any non-zero
// headers status stops iteration (Envoy turns StopIteration into
// StopAllIteration); non-zero data statuses stop and buffer. On Continue the
// map or buffer stops being reachable, as Envoy nulls its pointer.
func (v *vm) afterFilterCall(s *stream, ok bool, r uint32, mapType int, bodyIdx int) {
	if !ok || s.local != nil || s.closeReq {
		return // failure, local reply and close are handled by advance
	}
	if r == 0 {
		if mapType >= 0 {
			s.avail[mapType] = false
		}
		if bodyIdx >= 0 {
			s.bodyAvail[bodyIdx] = false
		}
		return
	}
	s.paused = true
}

func boolArg(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x := hex.EncodeToString(b[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

func (s *stream) snapshotRequest() *Result {
	s.result.RequestHeaders = s.maps[MapRequestHeaders].pairs()
	s.result.RequestBody = append([]byte(nil), s.body[0]...)
	snap := s.result
	return &snap
}

// respond feeds the upstream response to the response side.
func (v *vm) respond(s *stream, resp *UpstreamResponse) {
	if s.done || s.phase != phWaitUpstream {
		return // a local reply already replaced the upstream response
	}
	hm := newHeaderMap(nil)
	hm.add(":status", strconv.Itoa(resp.Status))
	for _, p := range resp.Headers {
		if !strings.HasPrefix(p[0], ":") {
			hm.add(p[0], p[1])
		}
	}
	s.maps[MapResponseHeaders] = hm
	s.body[1] = resp.Body
	switch {
	case len(resp.Body) == 0 && len(resp.Chunks) > 0:
		s.chunks, s.cut = resp.Chunks, resp.Cut
		s.released = 1
		if resp.ChunkDelay <= 0 {
			s.released = len(resp.Chunks)
		}
	case len(resp.Body) == 0 && resp.Live != nil:
		s.chunks, s.live = [][]byte{}, true
	}
	if len(resp.Trailers) > 0 {
		s.maps[MapResponseTrailers] = newHeaderMap(resp.Trailers)
	}
	s.phase = phResponseHeaders
	v.advance(s)
	v.settle()
}

// nextChunk delivers the next released chunk of a streamed response body to the filter, and
// reports whether the stream can go on at once: false when it waits for the next chunk (an
// event asks the caller of Do to release it after ChunkDelay) or was cut. After the last chunk
// the stream goes on to the trailers, or ends cut.
func (v *vm) nextChunk(s *stream) bool {
	if s.delivered == len(s.chunks) && (!s.live || s.eof) {
		if s.cut {
			s.result.Truncated = true
			v.finish(s)
			return false
		}
		s.phase++ // to the trailers
		return true
	}
	if s.delivered >= s.released {
		ev := streamEvent{needChunk: true}
		if s.live {
			ev.status, ev.headers, ev.out = s.passed()
		}
		s.events <- ev
		return false
	}
	c := s.chunks[s.delivered]
	s.delivered++
	s.body[1] = c
	s.sent = append(s.sent, c...)
	eos := s.delivered == len(s.chunks) && !s.cut && s.maps[MapResponseTrailers] == nil && (!s.live || s.eof)
	s.bodyAvail[1] = true
	r, ok := v.callback(filterCallbacks[1][cbBody], v.fn.filter[1][cbBody], s.id, uint64(s.id), uint64(len(c)), boolArg(eos))
	v.afterFilterCall(s, ok, uint32(r), -1, 1)
	return true
}

// passed returns what the filter has passed downstream of a live body since the last call:
// the response headers the first time (status and pairs), and the body bytes since.
func (s *stream) passed() (status int, headers [][2]string, out []byte) {
	if !s.headersOut {
		s.headersOut = true
		headers = s.maps[MapResponseHeaders].pairs()
		status, _ = strconv.Atoi(headerValue(headers, ":status"))
	}
	out = s.sent[s.outBytes:]
	s.outBytes = len(s.sent)
	return status, headers, out
}

// pushChunk hands the filter the next piece of a live body, read with err (io.EOF: the body
// ended; another error cuts the stream).
func (v *vm) pushChunk(s *stream, data []byte, err error) {
	if s.done {
		return
	}
	if len(data) > 0 || err == io.EOF {
		s.chunks = append(s.chunks, data) // an empty last chunk carries end_of_stream
	}
	if err != nil {
		s.eof, s.cut = true, err != io.EOF
	}
	s.released = len(s.chunks)
	v.advance(s)
	v.settle()
}

// releaseChunk lets the next chunk of a streamed body reach the filter (see nextChunk).
func (v *vm) releaseChunk(s *stream) {
	if s.done {
		return
	}
	s.released++
	v.advance(s)
	v.settle()
}

// localReplyHeaders builds the headers of Envoy's local reply: :status, the
// guest's additional headers, then content-length / content-type (text/plain
// unless the guest set one) when there is a body.
func localReplyHeaders(lr *LocalResponse) *headerMap {
	hm := newHeaderMap(nil)
	hm.add(":status", strconv.Itoa(lr.Status))
	for _, p := range lr.Headers {
		hm.add(p[0], p[1])
	}
	if len(lr.Body) > 0 {
		hm.replace("content-length", strconv.Itoa(len(lr.Body)))
		if _, ok := hm.get("content-type"); !ok {
			hm.add("content-type", "text/plain")
		}
	}
	return hm
}

// startLocalReply applies a proxy_send_local_response after the callback that
// sent it returned. During the request side Envoy passes the reply through
// the encoder filters, this filter included: the guest's response callbacks
// run on it. Once the response side has started, Envoy sends it directly.
func (v *vm) startLocalReply(s *stream) {
	s.localSent = true
	lr := s.local
	s.result.Local = lr
	s.paused = false
	s.continueReq = [2]bool{}
	s.avail = [4]bool{}
	s.bodyAvail = [2]bool{}
	s.maps[MapResponseHeaders] = localReplyHeaders(lr)
	s.maps[MapResponseTrailers] = nil
	s.body[1] = lr.Body
	if s.phase <= phWaitUpstream {
		if s.result.RequestHeaders == nil {
			s.result.RequestHeaders = s.maps[MapRequestHeaders].pairs()
			s.result.RequestBody = append([]byte(nil), s.body[0]...)
		}
		s.phase = phResponseHeaders
		return
	}
	s.phase = phComplete
}

// failStream is FAIL_CLOSED: a 503 local reply with details wasm_fail_stream
// that does not go through the (failed) VM.
func (v *vm) failStream(s *stream) {
	if s.done {
		return
	}
	lr := &LocalResponse{Status: 503, Details: "wasm_fail_stream", GrpcStatus: 14}
	s.local, s.localSent = lr, true
	s.result.Local = lr
	s.result.Failed = true
	s.maps[MapResponseHeaders] = localReplyHeaders(lr)
	s.body[1] = nil
	if s.result.RequestHeaders == nil && s.maps[MapRequestHeaders] != nil {
		s.result.RequestHeaders = s.maps[MapRequestHeaders].pairs()
	}
	v.finish(s)
}

// finish tears the stream down (proxy_on_log -> proxy_on_done ->
// proxy_on_delete, Envoy's order) and reports the result.
func (v *vm) finish(s *stream) {
	v.teardown(s, nil)
}

func (v *vm) teardown(s *stream, err error) {
	if s.done {
		return
	}
	s.done = true
	s.paused = false
	s.avail = [4]bool{}
	s.bodyAvail = [2]bool{}
	s.logPhase = true
	id := uint64(s.id)
	if _, ok := v.callback("proxy_on_log", v.fn.onLog, s.id, id); ok {
		s.logPhase = false
		if _, ok := v.callback("proxy_on_done", v.fn.onDone, s.id, id); ok {
			v.callback("proxy_on_delete", v.fn.onDelete, s.id, id)
		}
	}
	s.logPhase = false
	delete(v.streams, s.id)
	if v.failed.Load() && !s.localSent && err == nil && !s.result.Reset {
		// The VM failed during teardown; the response itself was complete.
		s.result.Failed = true
	}
	res := s.result
	if hm := s.maps[MapResponseHeaders]; hm != nil && !res.Reset {
		res.ResponseHeaders = hm.pairs()
		res.Status, _ = strconv.Atoi(headerValue(res.ResponseHeaders, ":status"))
		res.ResponseBody = append([]byte(nil), s.body[1]...)
		if s.chunks != nil && !s.localSent {
			res.ResponseBody = s.sent
		}
		res.StreamedHeaders, res.StreamedBytes = s.headersOut, s.outBytes
	}
	if res.RequestHeaders == nil && s.maps[MapRequestHeaders] != nil {
		res.RequestHeaders = s.maps[MapRequestHeaders].pairs()
	}
	res.FilterState = s.properties
	select {
	case s.events <- streamEvent{done: true, result: &res, err: err}:
	default:
	}
}

// abortStream tears down a stream whose downstream went away (ctx ended).
// A callout it started is not cancelled: its response still reaches the
// root context, as in Envoy.
func (v *vm) abortStream(s *stream, err error) {
	if s.done {
		return
	}
	v.teardown(s, err)
	v.settle()
}

// abortAndWait tears s down on its VM's loop (abortStream) and returns once the teardown has
// run, or once the VM or the host stopped. Envoy handles a downstream reset on the stream's
// worker thread in one event, destroying the filter chain there (proxy_on_log, proxy_on_done,
// proxy_on_delete) before that worker runs anything else, so nothing outside the worker can
// see the stream reset but not yet logged. A caller of Do is such an outsider: when Do
// returns a cancelled stream's error, the filter's teardown (its counters, its queues) is
// already done, as it would be for anything reading Envoy's stats after the reset.
func (v *vm) abortAndWait(s *stream, err error) {
	done := make(chan struct{})
	v.postReliably(func() {
		defer close(done)
		v.abortStream(s, err)
	})
	select {
	case <-done:
	case <-v.quit:
	case <-v.h.closed:
	}
}

// durationMs converts a guest millisecond count.
func durationMs(ms uint32) time.Duration { return time.Duration(ms) * time.Millisecond }
