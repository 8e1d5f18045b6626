package filter

import (
	"reflect"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/stretchr/testify/require"
)

// A finished stream's context serves the next stream, reset to a new context's fields, unless
// a callout's callback still holds it (a callout that answered holds it no more); a second
// done call offers it only once.
func TestContextReuse(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":10,"window":"1s"}]}`))
	require.NoError(t, err)
	p := &plugin{cfg: cfg}
	p.warm() // the reuse lists' room, as configure gives it

	h := p.NewHttpContext(1).(*httpContext)
	h.finished, h.status, h.headers.set = true, 200, draftHeaders
	h.observed = make([]*ruleState, 0, 4)
	h.headers.values = make([]byte, 0, 32)
	h.OnHttpStreamDone()
	h.OnHttpStreamDone()
	require.Len(t, p.contexts, 1, "offered once")

	h2 := p.NewHttpContext(2).(*httpContext)
	require.Same(t, h, h2, "the finished context is reused")
	require.Equal(t, uint32(2), h2.id)
	require.False(t, h2.finished || h2.done || h2.queued)
	require.Zero(t, h2.callouts)
	require.Zero(t, h2.status)
	require.Zero(t, h2.headers.set)
	require.Empty(t, h2.observed)
	require.Equal(t, 4, cap(h2.observed), "its buffers are kept")
	require.Equal(t, 32, cap(h2.headers.values))
	require.Empty(t, h2.headers.values)
	require.Same(t, p, h2.plugin)

	// A stream with a callout in flight keeps its context: the answer may come after the
	// stream ended, and must find that stream's context, not a later stream's.
	h2.callouts, h2.finished = 1, true
	h2.OnHttpStreamDone()
	require.Empty(t, p.contexts)
	h3 := p.NewHttpContext(3).(*httpContext)
	require.NotSame(t, h2, h3)
	require.Equal(t, uint32(2), h2.id, "the old context is untouched")

	// A stream whose callouts have all answered (the request waited for them) is done with
	// them: its context is reused.
	h3.finished = true
	h3.OnHttpStreamDone()
	require.Same(t, h3, p.NewHttpContext(4).(*httpContext))
}

func TestContextReuseBounded(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":10,"window":"1s"}]}`))
	require.NoError(t, err)
	p := &plugin{cfg: cfg}
	p.warm() // the reuse lists' room, as configure gives it
	hs := make([]*httpContext, maxFreeContexts+5)
	for i := range hs {
		hs[i] = p.NewHttpContext(uint32(i + 1)).(*httpContext)
	}
	for _, h := range hs {
		h.finished = true
		h.OnHttpStreamDone()
	}
	require.Len(t, p.contexts, maxFreeContexts)
}

// An allowed request's rate-limit headers are rendered into its context's buffer, which a
// reused context keeps: once that buffer is large enough, rendering allocates nothing (not a
// string per request).
func BenchmarkRenderRateLimitHeaders(b *testing.B) {
	cfg, err := config.Parse([]byte(`{"rules":[{"name":"r","rate_limit_headers":"both","algorithm":"token_bucket","limit":10,"window":"1s"}]}`))
	require.NoError(b, err)
	r := cfg.Rules[0]
	rs := &ruleState{rule: r, policy: policyItem(r), maxWait: maxWait(r.Algorithm)}
	rs.setHeaderParts()
	rules := []applied{{rs: rs, decided: true, decision: algorithms.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 3e8}}}
	rh := rateLimitHeaders{values: make([]byte, 0, 128)}
	b.ReportAllocs()
	for b.Loop() {
		rh.render(rules)
	}
	require.Equal(b, `"r";q=10;w=1"r";r=7;t=11071`, string(rh.values))
	if allocs := testing.AllocsPerRun(100, func() { rh.render(rules) }); allocs != 0 {
		b.Fatalf("%v allocations per rendering", allocs)
	}
}

// NewHttpContext resets a reused context field by field: every field, including any added
// later, must start as in a new context, except the buffers it keeps.
func TestNewHttpContextResetsEveryField(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":10,"window":"1s"}]}`))
	require.NoError(t, err)
	p := &plugin{cfg: cfg}
	p.warm() // the reuse lists' room, as configure gives it
	h := p.NewHttpContext(1).(*httpContext)
	v := reflect.ValueOf(h).Elem()
	for i := range v.NumField() {
		if v.Type().Field(i).Type.Size() > 0 { // types.DefaultHttpContext has nothing to set
			setNonZero(t, v.Field(i))
		}
	}
	observedBuf, valuesBuf := &h.observed[:1][0], &h.headers.values[:1][0]
	p.recycleContext(h)
	h2 := p.NewHttpContext(2).(*httpContext)
	require.Same(t, h, h2, "the context is reused")
	w := reflect.ValueOf(h2).Elem()
	for i := range w.NumField() {
		switch name := w.Type().Field(i).Name; name {
		case "plugin":
			require.Same(t, p, h2.plugin)
		case "id":
			require.Equal(t, uint32(2), h2.id)
		case "observed":
			require.Empty(t, h2.observed)
			require.Same(t, observedBuf, &h2.observed[:1][0], "the observed buffer is kept")
		case "redisAnswer":
			require.NotNil(t, h2.redisAnswer, "the callback, bound to the context, is kept")
		case "headers":
			require.Empty(t, h2.headers.values)
			require.Same(t, valuesBuf, &h2.headers.values[:1][0], "the header value buffer is kept")
			h2.headers.values = nil
			require.True(t, reflect.ValueOf(h2.headers).IsZero(), "headers are not reset: %+v", h2.headers)
		default:
			require.True(t, w.Field(i).IsZero(), "field %s is not reset", name)
		}
	}
}

// A context's headers are rendered in place, over the last request's: a request whose rules
// show no headers must add none, whatever the request before it added.
func TestRenderReplacesLastRequestsHeaders(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[{"name":"r","rate_limit_headers":"both","algorithm":"token_bucket","limit":10,"window":"1s"}]}`))
	require.NoError(t, err)
	r := cfg.Rules[0]
	rs := &ruleState{rule: r, policy: policyItem(r), maxWait: maxWait(r.Algorithm)}
	rs.setHeaderParts()
	rules := []applied{{rs: rs, decided: true, decision: algorithms.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 3e8}}}
	var rh rateLimitHeaders
	rh.render(rules)
	require.Equal(t, uint8(draftHeaders|legacyHeaders), rh.set)
	require.Equal(t, `"r";q=10;w=1"r";r=7;t=1107`, string(rh.values[:rh.ends[4]-1]))
	rules[0].decided = false
	rh.render(rules)
	require.Zero(t, rh.set)
	require.Equal(t, [len(rateLimitHeaderNames)]int32{}, rh.ends)
	require.Empty(t, rh.values)
}
