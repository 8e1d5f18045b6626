package filter

import (
	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

type httpContext struct {
	types.DefaultHttpContext
	plugin *plugin
	id     uint32
	d      *decisions

	// headers are the rate-limit headers to add to the upstream's response.
	headers rateLimitHeaders
	// finished is set once the request has been let through or denied; done once the stream
	// is gone. A late callout answer for either decides nothing for the request (lateAnswer).
	finished, done bool
	// queued is set while a shaping rule holds the request in the plugin's queue.
	queued bool
	// callouts counts the stream's callouts in flight: each one's callback holds the context
	// and may run after the stream ended, so a context is reused only once all have answered.
	callouts int
	// asked is the working set of the request's call to Redis in flight (sendCallout), and
	// redisAnswer that call's callback, answerRedis, made once for the context.
	asked       *decisions
	redisAnswer func(numHeaders, bodySize, numTrailers int)

	usage *usageStream // the stream's open reservations of usage costs (see usage.go), if any

	// observed lists the adaptive rules that admitted the request; its outcome feeds them.
	observed               []*ruleState
	startedAt, respondedAt int64
	status                 int
}

// OnHttpRequestHeaders decides the request. Every rule is decided before any state is written
// (see the package comment), so a request one rule denies costs the other rules nothing.
func (h *httpContext) OnHttpRequestHeaders(int, bool) (action types.Action) {
	defer recoverTo("OnHttpRequestHeaders", func() { action = h.failOpenOrClosed() })
	return h.decideRequest()
}

// OnHttpResponseHeaders adds the rate-limit headers decided on the request.
func (h *httpContext) OnHttpResponseHeaders(_ int, endOfStream bool) types.Action {
	defer recoverTo("OnHttpResponseHeaders", nil)
	if len(h.observed) > 0 {
		h.noteResponse()
	}
	if h.usage != nil {
		h.usageHeaders(endOfStream)
	}
	// Added here rather than by a function of their own, which a VM's first request would
	// compile as code of its own (see doc.go).
	rh := &h.headers
	var start int32
	for i, name := range rateLimitHeaderNames {
		if rh.set&(1<<i) == 0 {
			continue
		}
		end := rh.ends[i]
		if err := abi.AddHttpResponseHeaderBytes(name, rh.values[start:end]); err != nil {
			logAddFailure(name, err)
		}
		start = end
	}
	return types.ActionContinue
}

// noteResponse records when the upstream answered and with what status, for the adaptive
// rules that observe the request (out of line, see doc.go).
func (h *httpContext) noteResponse() {
	h.respondedAt = h.plugin.now()
	if s, err := abi.GetHttpResponseHeader(":status"); err == nil {
		h.status = atoi(s)
	}
}

// OnHttpStreamDone forgets the stream. A callout still in flight for it decides nothing for it
// when its answer arrives (see lateAnswer for what the answer still does).
func (h *httpContext) OnHttpStreamDone() {
	defer recoverTo("OnHttpStreamDone", nil)
	// A second call must not offer the context for reuse twice. One return, not an early one:
	// the compiler writes the deferred call out at each return (see doc.go).
	if !h.done {
		h.done = true
		if (!h.finished && h.d != nil) || h.queued || len(h.observed) > 0 || h.usage != nil {
			h.settleStream()
		}
		// Envoy calls no filter code of a stream after proxy_on_log: only a callout's callback
		// or the shaping queue (emptied of it just now) can still refer to the context.
		if h.callouts == 0 && !h.queued {
			h.plugin.recycleContext(h)
		}
	}
}

// settleStream does the part of OnHttpStreamDone that only some streams need (out of line,
// see doc.go).
func (h *httpContext) settleStream() {
	if !h.finished && h.d != nil {
		// The client went away before the request was decided: its lease units go back.
		h.refundLeases()
		h.plugin.giveDecisions(h)
	}
	if h.queued && h.plugin.dequeue(h.id) {
		// Given up while queued: it says nothing about the upstream's health.
		h.observed = h.observed[:0]
	}
	if len(h.observed) > 0 {
		h.observe(h.plugin.now())
	}
	if h.usage != nil {
		h.settleUsage()
	}
}
