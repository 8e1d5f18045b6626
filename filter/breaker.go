package filter

import "github.com/ratelimit-wasm/ratelimit/abi"

// breakerGauge publishes the state of this worker VM's breaker in process-wide metrics.
//
// Each worker VM has its own breaker, but Envoy's stats are process-wide: every VM's
// ratelimit_redis_breaker_open is the same gauge, and recording 1 or 0 into it from each
// worker would make it say whatever the last worker to change state said. So each VM adds 1
// when its breaker opens and subtracts 1 when it closes (proxy_increment_metric adds to or
// subtracts from a gauge), and the gauge counts the worker VMs whose breaker is open right
// now: 0 means every worker uses Redis. The counter ratelimit_redis_breaker_opened_total
// counts the openings, which a gauge scraped every few seconds can miss.
type breakerGauge struct {
	open   abi.MetricGauge   // worker VMs whose breaker is open, process-wide
	opened abi.MetricCounter // transitions from closed to open, process-wide
	// counted is set while this VM's 1 is included in open, so that a breaker that opens
	// again after a failed probe is not counted twice.
	counted bool
}

// defineBreakerGauge defines the breaker's metrics.
func defineBreakerGauge() (breakerGauge, error) {
	var g breakerGauge
	var err error
	if g.open, err = abi.DefineGaugeMetric("ratelimit_redis_breaker_open"); err != nil {
		return g, err
	}
	g.opened, err = abi.DefineCounterMetric("ratelimit_redis_breaker_opened_total")
	return g, err
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

// OnPluginDone takes this VM's share out of the process-wide breaker gauge when Envoy
// retires the VM's plugin (a configuration update or shutdown): the gauge outlives the VM,
// and a VM that went away with its breaker open would otherwise count as open for good.
func (p *plugin) OnPluginDone() bool {
	defer recoverTo("OnPluginDone", nil)
	if p.redis != nil {
		p.redis.gauge.set(false)
	}
	return true
}
