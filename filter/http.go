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
	// is gone. A late callout answer for either decides nothing for the request (it still
	// feeds the VM's leases, the latency histogram and the breaker: lateAnswer).
	finished, done bool
	// queued is set while a shaping rule holds the request in the plugin's queue.
	queued bool
	// callouts counts the stream's callouts in flight: each one's callback holds the context,
	// and may run after the stream ended, so a context is reused only once every callout it
	// sent has answered (nearly always before the stream ends: the request waits for them).
	callouts int
	// asked is the working set of the request's call to Redis in flight (sendCallout), and
	// redisAnswer that call's callback, answerRedis, made once for the context.
	asked       *decisions
	redisAnswer func(numHeaders, bodySize, numTrailers int)

	// usage holds the stream's open reservations of usage costs (see usage.go); nil for
	// most streams.
	usage *usageStream

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

// OnHttpResponseHeaders adds the rate-limit headers decided on the request (see
// rateLimitHeaders).
func (h *httpContext) OnHttpResponseHeaders(_ int, endOfStream bool) types.Action {
	if len(h.observed) > 0 {
		h.noteResponse()
	}
	if h.usage != nil {
		h.usageHeaders(endOfStream)
	}
	// The headers are added here rather than by a function of their own: a VM's first
	// request compiles every function it calls (see doc.go), and each is code of its own.
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
	// Envoy logs a stream once; a second call must not offer the context for reuse twice.
	if !h.done {
		h.done = true
		if (!h.finished && h.d != nil) || h.queued || len(h.observed) > 0 || h.usage != nil {
			h.settleStream()
		}
		// Envoy calls nothing of a stream's after proxy_on_log but proxy_on_done and
		// proxy_on_delete, which reach no filter code. What can still refer to the context is
		// a callout's callback, which may answer after the stream ended, and the shaping
		// queue, which dequeue has just emptied of it: a context without either is the
		// plugin's again.
		if h.callouts == 0 && !h.queued {
			h.plugin.recycleContext(h)
		}
	}
}

// settleStream does the part of OnHttpStreamDone that only some streams need: one that ended
// undecided, one that waits in a shaping queue, one an adaptive rule observes (out of line,
// see doc.go).
func (h *httpContext) settleStream() {
	if !h.finished && h.d != nil {
		// The client went away before the request was decided (it never reached the
		// upstream): the units leases gave it go back, as for a denied request.
		h.refundLeases()
		h.plugin.giveDecisions(h)
	}
	if h.queued && h.plugin.dequeue(h.id) {
		// The client gave up while the request waited in a shaping queue: it never reached
		// the upstream, so it says nothing about the upstream's health.
		h.observed = h.observed[:0]
	}
	if len(h.observed) > 0 {
		h.observe(h.plugin.now())
	}
	if h.usage != nil {
		h.settleUsage()
	}
}
