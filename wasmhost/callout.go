package wasmhost

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// maxCalloutBody bounds a callout response body (Envoy's async client has a
// buffer limit too; exceeding it is a failure, like a reset).
const maxCalloutBody = 64 << 20

// calloutDropped are the guest's callout headers that do not go out as headers: the
// authority is the Host, and the length is the body's own.
var calloutDropped = map[string]bool{"host": true, "content-length": true}

// callout is one proxy_http_call in flight.
type callout struct {
	v        *vm
	token    uint32
	base     string
	headers  *headerMap
	body     []byte
	trailers [][2]string
	timeout  time.Duration
}

// calloutResponse is what proxy_on_http_call_response can read: headers
// (map 6, with :status), body (buffer 4) and trailers (map 7, nil if none).
// reset means Envoy's onFailure: nothing readable, get_status = 11.
type calloutResponse struct {
	headers  *headerMap
	body     []byte
	trailers *headerMap
	reset    bool
}

// sendOutbound starts the callouts the guest dispatched during the call into it that has just
// returned. Envoy's proxy_http_call creates the request and returns; the request leaves when
// the worker's event loop runs again, after the guest's callback. Starting each callout from
// within proxy_http_call instead would count the goroutine it starts (and the other threads it
// wakes, which compete for the CPU with the rest of the callback) in the guest's time.
func (v *vm) sendOutbound() {
	for i, c := range v.outbound {
		v.h.startCallout(c)
		v.outbound[i] = nil
	}
	v.outbound = v.outbound[:0]
}

// startCallout performs the request on a callout worker and delivers the response on the VM's
// loop to the root context: an idle worker takes it, or a new one starts when none is idle. A
// worker that has performed a callout waits for the next one rather than ending: a goroutine
// started per callout would grow its stack through net/http's calls anew each time, and that
// is time on every global request's path. There are as many workers as callouts were ever in
// flight at once; each performs one at a time, bounded by the callout timeout, and ends at Close.
func (h *Host) startCallout(c *callout) {
	select {
	case h.callouts <- c:
	default:
		h.wg.Add(1)
		go h.calloutWorker(c)
	}
}

// calloutWorker performs c, then every callout it is handed, until the host closes.
func (h *Host) calloutWorker(c *callout) {
	defer h.wg.Done()
	for {
		if resp := h.performCallout(c); resp != nil {
			// The delivery runs later, on the VM's loop, after c names the next callout.
			v, token := c.v, c.token
			v.post(h.baseCtx, func() { v.deliverCallout(token, resp) })
		}
		select {
		case c = <-h.callouts:
		case <-h.baseCtx.Done():
			return
		}
	}
}

func (h *Host) performCallout(c *callout) *calloutResponse {
	if c.base == "reset:" {
		return &calloutResponse{reset: true}
	}
	ctx := h.baseCtx
	if c.timeout > 0 {
		// The timeout runs on the host's time (virtual or real); when it expires the
		// request's context ends with DeadlineExceeded as its cause, as with
		// context.WithTimeout.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := h.afterFunc(c.timeout, func() { cancel(context.DeadlineExceeded) })
		defer stop()
	}
	req, err := outgoingRequest(ctx, c.base, c.headers.kv, c.body, calloutDropped)
	if err != nil {
		return envoyLocal(503, "upstream connect error or disconnect/reset before headers. reset reason: connection failure")
	}
	start := time.Now()
	resp, err := h.transport.RoundTrip(req)
	if err != nil {
		if h.baseCtx.Err() != nil {
			return nil
		}
		return calloutError(ctx, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCalloutBody+1))
	if err != nil || len(body) > maxCalloutBody {
		if h.baseCtx.Err() != nil {
			return nil
		}
		// The response had started: Envoy's async client reports a reset
		// (onFailure), not a local reply.
		return &calloutResponse{reset: true}
	}
	// The headers as the async client hands them over: :status, the upstream's (lower-cased
	// by appendHeaderPairs, never pseudo-headers), then the router's service time.
	hm := &headerMap{kv: make([][2]string, 1, len(resp.Header)+2)}
	hm.kv[0] = [2]string{":status", strconv.Itoa(resp.StatusCode)}
	hm.kv = appendHeaderPairs(hm.kv, resp.Header)
	hm.add("x-envoy-upstream-service-time", strconv.FormatInt(time.Since(start).Milliseconds(), 10))
	cr := &calloutResponse{headers: hm, body: body}
	if len(resp.Trailer) > 0 {
		cr.trailers = newHeaderMap(headerPairs(resp.Trailer))
	}
	return cr
}

// calloutError maps a failure before response headers to the response
// Envoy's router would have produced: a timeout is 504 "upstream request
// timeout", an unresolvable host is 503 "no healthy upstream", anything else
// is 503 "upstream connect error ...".
func calloutError(ctx context.Context, err error) *calloutResponse {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return envoyLocal(504, "upstream request timeout")
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return envoyLocal(503, "no healthy upstream")
	}
	reason := "connection failure"
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "connection reset") {
		reason = "connection termination"
	}
	return envoyLocal(503, "upstream connect error or disconnect/reset before headers. reset reason: "+reason)
}

// envoyLocal builds a router local reply as the async client delivers it.
func envoyLocal(status int, body string) *calloutResponse {
	hm := newHeaderMap(nil)
	hm.add(":status", strconv.Itoa(status))
	hm.add("content-length", strconv.Itoa(len(body)))
	hm.add("content-type", "text/plain")
	return &calloutResponse{headers: hm, body: []byte(body)}
}

// deliverCallout calls proxy_on_http_call_response on the root context, even
// when the stream that started the call is gone (Envoy does not cancel it).
func (v *vm) deliverCallout(token uint32, cr *calloutResponse) {
	if !v.rootAlive || v.failed.Load() {
		return
	}
	var nh, nb, nt uint64
	if cr.reset {
		v.statusCode = uint32(StatusBrokenConnection)
		v.statusMsg = "reset"
	} else {
		v.callout = cr
		nh, nb = uint64(cr.headers.size()), uint64(len(cr.body))
		if cr.trailers != nil {
			nt = uint64(cr.trailers.size())
		}
	}
	v.callback("proxy_on_http_call_response", v.fn.onHTTPCallResponse, v.rootID, uint64(v.rootID), uint64(token), nh, nb, nt)
	// Envoy clears the response and the status message after the callback
	// (the status code itself stays until the next failure).
	v.callout = nil
	v.statusMsg = ""
	v.settle()
}
