package filter

import (
	"errors"
	"fmt"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Global rules keep their state in Redis, reached through webdis with one HTTP callout per rule
// and request. The request waits (StopIteration) until every callout has answered; the answers
// arrive at the root context and the ABI layer makes the stream the effective context again
// before the callback below runs.

// redisClient is the plugin's connection to webdis: the cluster, the breaker and the metrics.
type redisClient struct {
	cfg     *config.Redis
	headers [][2]string
	breaker breaker
	gauge   breakerGauge // publishes the breaker's state process-wide
	m       redisMetrics
	body    []byte // scratch for request bodies; a callout copies it
	key     []byte
}

type redisMetrics struct {
	calls       abi.MetricCounter   // callouts sent
	skipped     abi.MetricCounter   // decisions not sent because the breaker was open
	unavailable abi.MetricCounter   // webdis answered 502/503 (Redis down, no healthy host)
	timeouts    abi.MetricCounter   // no answer within the timeout (Envoy answers 504)
	errors      abi.MetricCounter   // Redis answered with an error
	malformed   abi.MetricCounter   // the answer was not a script result
	resets      abi.MetricCounter   // the callout was reset or could not be sent
	noscript    abi.MetricCounter   // Redis had lost the script; it was sent again in full
	latency     abi.MetricHistogram // callout round trip, microseconds
}

func newRedisClient(cfg *config.Redis) (*redisClient, error) {
	c := &redisClient{
		cfg: cfg,
		headers: [][2]string{
			{":method", "POST"}, {":path", "/"}, {":authority", cfg.Authority},
			{"content-type", "application/x-www-form-urlencoded"},
		},
		breaker: breaker{threshold: cfg.Breaker.Failures, cooldown: int64(cfg.Breaker.Cooldown),
			probeWait: int64(cfg.Timeout)},
	}
	var errs []error
	counter := func(name string) abi.MetricCounter {
		m, err := abi.DefineCounterMetric("ratelimit_redis_" + name + "_total")
		errs = append(errs, err)
		return m
	}
	c.m = redisMetrics{
		calls: counter("calls"), skipped: counter("skipped"), unavailable: counter("unavailable"),
		timeouts: counter("timeouts"), errors: counter("errors"), malformed: counter("malformed"),
		resets: counter("resets"), noscript: counter("noscript"),
	}
	var err error
	c.gauge, err = defineBreakerGauge()
	errs = append(errs, err)
	c.m.latency, err = abi.DefineHistogramMetric("ratelimit_redis_latency_us")
	errs = append(errs, err)
	return c, errors.Join(errs...)
}

// breaker keeps a dead Redis from costing every request a timeout. After threshold consecutive
// failures it opens for cooldown: global rules go straight to their failure mode. Then one
// request probes Redis; its success closes the breaker, its failure opens it again. Each worker
// VM has its own breaker and learns about an outage from its own callouts.
//
// A probe's answer can be lost: when the probing request's stream is torn down first (the
// client went away), the ABI layer drops the answer, as the stream is gone. A probe unanswered
// for longer than the callout timeout, which the host enforces on every callout, was therefore
// lost, and the next request sends another one; without that, the worker would skip Redis for
// good.
//
// The probe is a request, not a callout: every global rule of the probing request is sent.
// Were its other rules skipped, a failure mode that denies would end the request at once, and
// the probe's answer would be dropped with it, on every probe.
type breaker struct {
	threshold int
	cooldown  int64
	probeWait int64 // the callout timeout
	failures  int
	openUntil int64 // 0: closed; while probing, when the probe counts as lost
	probing   bool
	prober    uint32 // the stream that probes (context ids are never reused)
}

// allow reports whether stream may send a callout at now.
func (b *breaker) allow(now int64, stream uint32) bool {
	switch {
	case b.openUntil == 0:
		return true
	case b.probing && b.prober == stream:
		return true
	case now < b.openUntil:
		return false
	default:
		b.probing, b.prober = true, stream
		b.openUntil = now + max(b.cooldown, b.probeWait)
		return true
	}
}

// success records an answered callout and reports whether the breaker was open.
func (b *breaker) success() (closed bool) {
	wasOpen := b.openUntil != 0
	b.failures, b.openUntil, b.probing = 0, 0, false
	return wasOpen
}

// failure records a failed callout and reports whether the breaker opened because of it.
func (b *breaker) failure(now int64) (opened bool) {
	b.failures++
	if b.probing || (b.openUntil == 0 && b.failures >= b.threshold) {
		b.openUntil, b.probing = now+b.cooldown, false
		return true
	}
	return false
}

// askRedis sends a global rule's callout, or applies the Redis failure mode when it cannot be
// sent. It reports whether the request must be denied now.
func (h *httpContext) askRedis(a *applied, now int64) (deny bool) {
	c := h.plugin.redis
	if !c.breaker.allow(now, h.id) {
		c.m.skipped.Increment(1)
		return h.redisFailed(a, now)
	}
	if err := h.sendCallout(a, now, false); err != nil {
		// noteFailure counts it by kind and feeds the breaker.
		h.noteFailure(now, sendError(err))
		return h.redisFailed(a, now)
	}
	return false
}

func (h *httpContext) sendCallout(a *applied, now int64, full bool) error {
	c := h.plugin.redis
	rr := h.plugin.globals[a.rs.rule.Index]
	c.key = redis.AppendKey(c.key[:0], c.cfg.KeyPrefix, a.rs.rule.Name, a.key)
	if full {
		c.body = rr.AppendEval(c.body[:0], c.key, a.cost)
	} else {
		c.body = rr.AppendEvalSHA(c.body[:0], c.key, a.cost)
	}
	timeout := uint32((c.cfg.Timeout + 999_999) / 1_000_000)
	// The callback holds the request's working set itself: the stream may be decided (and
	// its set detached) by another answer before this one arrives.
	d := h.d
	_, err := abi.DispatchHttpCall(c.cfg.Cluster, c.headers, c.body, nil, timeout,
		func(numHeaders, bodySize, numTrailers int) {
			d.outstanding--
			h.onRedisAnswer(a, numHeaders, bodySize, numTrailers)
		})
	if err != nil {
		return err
	}
	c.m.calls.Increment(1)
	a.sentAt = now
	h.d.outstanding++
	return nil
}

// onRedisAnswer handles one callout answer. It runs from the root context with the stream made
// effective again.
func (h *httpContext) onRedisAnswer(a *applied, numHeaders, bodySize, numTrailers int) {
	p := h.plugin
	c := p.redis
	if h.done || h.finished {
		return
	}
	defer recoverTo("onRedisAnswer", func() {
		if h.failOpenOrClosed() == types.ActionContinue {
			_ = abi.ResumeHttpRequest()
		}
	})
	now := p.now()
	if us := (now - a.sentAt) / 1000; us >= 0 {
		c.m.latency.Record(uint64(us))
	}
	err := errCalloutReset
	var reply redis.Reply
	if !abi.CalloutFailed(numHeaders, bodySize, numTrailers) {
		reply, err = redis.ParseReply(calloutStatus(), calloutBody(bodySize))
		if err == nil && reply.Decision.Limit != p.globals[a.rs.rule.Index].Limit() {
			// Every script answers with the limit it was given, so another limit means the
			// answer is not for this request (a misrouted cluster, a proxy in between): it is
			// treated like any other malformed answer rather than trusted.
			err = errForeignReply
		}
	}
	switch {
	case err == nil:
		if c.breaker.success() {
			c.gauge.set(false)
			abi.LogInfof("ratelimit: redis answers again; global rules use it")
		}
		a.decision, a.decided = reply.Decision, true
	case errors.Is(err, redis.ErrNoScript) && !a.retried:
		// Redis restarted or its script cache was flushed: send the script itself once,
		// which also loads it for every later EVALSHA.
		c.m.noscript.Increment(1)
		a.retried = true
		if h.sendCallout(a, now, true) == nil {
			return
		}
		h.noteFailure(now, err)
		if h.redisFailed(a, now) {
			h.deny(a.rs, a.decision)
			return
		}
	default:
		h.noteFailure(now, err)
		if h.redisFailed(a, now) {
			h.deny(a.rs, a.decision)
			return
		}
	}
	if a.decided && !a.decision.Allowed && !a.rs.rule.Shadow {
		h.deny(a.rs, a.decision)
		return
	}
	if h.d.outstanding > 0 {
		return
	}
	if h.finish() == types.ActionContinue {
		if err := abi.ResumeHttpRequest(); err != nil {
			abi.LogWarnf("ratelimit: resuming the request: %v", err)
		}
	}
}

var (
	errCalloutReset = errors.New("callout reset")
	errForeignReply = fmt.Errorf("%w: the answer carries another rule's limit", redis.ErrMalformed)
	errNoHosts      = fmt.Errorf("%w: the cluster has no host (proxy_http_call failed with InternalFailure)",
		redis.ErrUnavailable)
)

// sendError classifies a callout that could not be sent. Envoy fails proxy_http_call at once
// with InternalFailure when the cluster has no host to send to, and then never calls back:
// Redis is then unavailable, as surely as when webdis answers 503. Anything else (a cluster
// Envoy does not know, a bad argument) stays unclassified and is counted as a reset.
func sendError(err error) error {
	if errors.Is(err, abi.ErrInternalFailure) {
		return errNoHosts
	}
	return err
}

// noteFailure counts a failed Redis decision by kind and feeds the breaker.
func (h *httpContext) noteFailure(now int64, err error) {
	c := h.plugin.redis
	var se *redis.StatusError
	switch {
	case errors.As(err, &se) && se.Status == 504:
		c.m.timeouts.Increment(1)
	case errors.Is(err, redis.ErrUnavailable):
		c.m.unavailable.Increment(1)
	case errors.Is(err, redis.ErrRedis), errors.Is(err, redis.ErrNoScript):
		c.m.errors.Increment(1)
	case errors.Is(err, redis.ErrMalformed):
		c.m.malformed.Increment(1)
	default:
		c.m.resets.Increment(1)
	}
	if c.breaker.failure(now) {
		c.gauge.set(true)
		abi.LogWarnf("ratelimit: redis failed %d times in a row (last: %v); global rules apply failure_mode %q for %v",
			c.breaker.failures, err, c.cfg.FailureMode, c.cfg.Breaker.Cooldown)
	}
}

// redisFailed applies the Redis failure mode to a global rule whose decision Redis could not
// make. It reports whether the request must be denied now.
func (h *httpContext) redisFailed(a *applied, now int64) (deny bool) {
	switch h.plugin.redis.cfg.FailureMode {
	case config.RedisFailDeny:
		a.decision = failureDecision(a.rs)
		return true
	case config.RedisFailLocal:
		// The rule's own limit, counted on this proxy only: the fleet as a whole may then admit
		// up to one limit per proxy, which is the best a partitioned proxy can promise.
		return h.decideLocal(a, a.key, now, a.cost)
	default:
		a.decided = false
		return false
	}
}

func calloutStatus() int {
	s, err := abi.GetHttpCallResponseHeader(":status")
	if err != nil {
		return 0
	}
	return atoi(s)
}

// maxReplyBytes bounds what is read of a webdis answer: a script result is well under a
// hundred bytes, and anything much larger is not one.
const maxReplyBytes = 4096

func calloutBody(size int) []byte {
	if size <= 0 {
		return nil
	}
	b, err := abi.GetHttpCallResponseBody(0, min(size, maxReplyBytes))
	if err != nil {
		return nil
	}
	return b
}
