package filter

import (
	"github.com/ratelimit-wasm/ratelimit/abi"
)

// breaker keeps a dead Redis from costing every request a timeout. After threshold consecutive
// failures it opens for cooldown: global rules go straight to their failure mode. Then one
// request probes Redis; its success closes the breaker, its failure opens it again. Each worker
// VM has its own breaker and learns of an outage from its own callouts, answered even after the
// probing stream is gone (lateOutcome). A probe unanswered for longer than the callout timeout
// counts as lost, and the next request sends another: else the worker would skip Redis for
// good. Every global rule of the probing request is sent: a skipped one under a failure mode
// that denies would end the request at once.
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

// breakerGauge publishes this VM's breaker in process-wide metrics: each VM adds 1 to the
// gauge when its breaker opens and subtracts 1 when it closes (a 1 or 0 from each would say
// whatever the last one said), and counts the openings, which a scraped gauge can miss.
type breakerGauge struct {
	open   abi.MetricGauge   // worker VMs whose breaker is open, process-wide
	opened abi.MetricCounter // transitions from closed to open, process-wide
	// counted is set while this VM's 1 is included in open.
	counted bool
}

// set publishes whether this VM's breaker is open. Only a change moves the gauge.
func (g *breakerGauge) set(open bool) {
	if open == g.counted {
		return
	}
	g.counted = open
	if open {
		g.open.Add(1)
		g.opened.Increment(1)
		return
	}
	g.open.Add(-1)
}
