package filter

import (
	"errors"
	"strconv"
	"time"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
)

// Two behaviours run on each worker VM's timer (proxy_on_tick):
//
//   - Shaping (leaky_bucket with mode "shape"): a request over the rate is paused until its
//     release time on the rule's schedule, shared by all workers in shared data; the tick
//     resumes the streams whose time has come.
//   - Adaptive limits: each worker adds the health signals it observed to the rule's controller
//     state in shared data; the controller adjusts the limit at most once per interval, and
//     each worker reads the limit in force back.

// queued is a request paused by a shaping rule until release (Unix ns).
type queued struct {
	h                 *httpContext
	release, enqueued int64
	rs                *ruleState
}

// shapeMetrics are a shaping rule's queue metrics.
type shapeMetrics struct {
	queued   abi.MetricCounter   // requests paused to be released later
	released abi.MetricCounter   // paused requests resumed on schedule
	dropped  abi.MetricCounter   // paused requests whose stream ended before their release
	delay    abi.MetricHistogram // time spent queued, milliseconds
}

// adaptiveState is what the filter keeps per adaptive rule on this VM.
type adaptiveState struct {
	a       *algorithms.Adaptive
	lim     *adaptiveLimiter
	key     string             // the controller's shared-data key
	signals algorithms.Signals // observed on this VM since the last flush
	state   []byte             // scratch for the controller state
	gauge   abi.MetricGauge    // the limit in force
}

// adaptiveLimiter is an adaptive rule's table limiter: it admits under limit, which the tick
// updates.
type adaptiveLimiter struct {
	a     *algorithms.Adaptive
	limit int64
}

func (l *adaptiveLimiter) AllowN(state []byte, now, n int64) (algorithms.Decision, []byte) {
	return l.a.AllowNLimit(state, now, n, l.limit)
}

func (l *adaptiveLimiter) Idle(state []byte, now int64) bool { return l.a.Idle(state, now) }

// tickPeriod picks the timer period, within [1ms, 1s]: a quarter of a shaping rule's emission
// interval, and of an adaptive rule's adjust interval. Without either, a partitioned Redis
// needs it for the partition secret's refresh (refreshSecret).
func tickPeriod(rules []*ruleState, partitioned bool) time.Duration {
	period := time.Duration(0)
	consider := func(d time.Duration) {
		d = max(time.Millisecond, min(d, time.Second))
		if period == 0 || d < period {
			period = d
		}
	}
	for _, rs := range rules {
		if rs.shape != nil {
			consider(rs.rule.Algorithm.Window / time.Duration(rs.rule.Algorithm.Limit) / 4)
		}
		if rs.adaptive != nil {
			consider(rs.rule.Algorithm.AdjustInterval / 4)
		}
	}
	if period == 0 && partitioned {
		period = time.Duration(secretRefresh)
	}
	return period
}

// enqueue pauses the stream until release.
func (p *plugin) enqueue(h *httpContext, rs *ruleState, now, release int64) {
	p.queue = append(p.queue, queued{h: h, release: release, enqueued: now, rs: rs})
	rs.shape.queued.Increment(1)
	h.queued = true
}

// releaseDue resumes every queued stream whose release time has come.
func (p *plugin) releaseDue(now int64) {
	kept := p.queue[:0]
	for _, q := range p.queue {
		if q.release > now {
			kept = append(kept, q)
			continue
		}
		q.h.queued = false
		q.rs.shape.delay.Record(uint64(max(0, now-q.enqueued) / 1e6))
		if abi.SetEffectiveContext(q.h.id) != nil || abi.ResumeHttpRequest() != nil {
			// The stream is gone without its done callback: count it like a client that gave up.
			q.rs.shape.dropped.Increment(1)
			continue
		}
		q.rs.shape.released.Increment(1)
		// The latency adaptive rules judge starts now: time in this queue is not the upstream's.
		q.h.startedAt = now
	}
	clear(p.queue[len(kept):])
	p.queue = kept
}

// dequeue drops a stream that ended while queued, so it is neither resumed nor leaked. It
// reports whether the stream was still queued (false once it has been released).
func (p *plugin) dequeue(id uint32) bool {
	for i, q := range p.queue {
		if q.h.id == id {
			q.h.queued = false
			q.rs.shape.dropped.Increment(1)
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			return true
		}
	}
	return false
}

// updateAdaptive adds this VM's signals to the rule's controller with a bounded CAS loop
// (sharedstate.Update) and adopts the limit in force. When every attempt loses, the signals are
// kept for the next tick.
func (p *plugin) updateAdaptive(rs *ruleState, now int64) {
	ad := rs.adaptive
	var limit int64
	lost, err := sharedstate.Update(sharedstate.Host{}, ad.key, p.cfg.CASAttempts, func(cur []byte) []byte {
		ad.state = append(ad.state[:0], cur...)
		limit, ad.state = ad.a.Update(ad.state, ad.signals, now)
		return ad.state
	})
	if lost > 0 {
		rs.m.casRetries.Increment(uint64(lost))
	}
	switch {
	case err == nil:
		ad.signals = algorithms.Signals{}
		if limit != ad.lim.limit {
			abi.LogInfo("ratelimit: rule " + strconv.Quote(rs.rule.Name) + ": adaptive limit " + strconv.FormatInt(ad.lim.limit, 10) + " -> " + strconv.FormatInt(limit, 10))
		}
		ad.lim.limit = limit
		ad.gauge.Record(limit)
	case !errors.Is(err, sharedstate.ErrAttemptsExhausted):
		p.storeFailure(rs, err)
	}
}

// observe records the outcome of a request adaptive rules admitted: its latency from when it
// went upstream to its response headers, and whether it failed (a 5xx, or no response).
func (h *httpContext) observe(now int64) {
	for _, rs := range h.observed {
		s := &rs.adaptive.signals
		s.Requests++
		if h.status == 0 || h.status >= 500 {
			s.Errors++
		}
		if h.respondedAt > 0 {
			s.LatencySum += time.Duration(max(0, h.respondedAt-h.startedAt))
		} else {
			s.LatencySum += time.Duration(max(0, now-h.startedAt))
		}
	}
	h.observed = h.observed[:0]
}
