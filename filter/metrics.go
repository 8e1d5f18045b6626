package filter

import (
	"errors"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
)

// ruleMetrics are the rule's counters (see statName for their names).
type ruleMetrics struct {
	allowed      abi.MetricCounter // requests the rule let through
	denied       abi.MetricCounter // requests the rule rejected
	shadowDenied abi.MetricCounter // requests a shadow rule would have rejected
	skipped      abi.MetricCounter // requests the rule matched but could not key (missing part)
	casRetries   abi.MetricCounter // compare-and-swap attempts lost to other workers
	storeErrors  abi.MetricCounter // decisions that fell back to failure_mode
	overflow     abi.MetricCounter // decisions, allowed or denied, counted in an overflow slot
	casExhausted abi.MetricCounter // requests denied because every compare-and-swap attempt lost
	// evictions counts keys whose slot went to a new key (see sharedstate.Table), and
	// evictionGranted what those keys may spend again because of it (0 for an idle key).
	evictions       abi.MetricCounter
	evictionGranted abi.MetricCounter
	// slotsUsed is the number of the rule's key slots that hold or have held a key: each
	// worker adds those it places a key in first to Envoy's process-wide gauge (see placed).
	slotsUsed abi.MetricGauge
	// duplicateHeader and keyTooLong count requests refused (a shadow rule's skipped) for a
	// repeated key header (duplicateKeyHeader) or a key over max_key_bytes (keyTooLong).
	duplicateHeader, keyTooLong abi.MetricCounter
	// nearLimit counts admitted requests that left less than nearRemaining (see near.go).
	nearLimit abi.MetricCounter
}

// statName renders the name of one of a rule's stats: the metric, then its labels as
// ";<label>=<value>" ("ratelimit_requests_total;rule=login;decision=denied"), which Envoy's tag
// extraction (stats_config.stats_tags) turns into labels for Prometheus. Rule names are
// [A-Za-z0-9_.-], so they never contain ';'.
func statName(metric, rule string, labels ...string) string {
	n := metric + ";rule=" + rule
	for i := 0; i+1 < len(labels); i += 2 {
		n += ";" + labels[i] + "=" + labels[i+1]
	}
	return n
}

// defineCounter defines the counter called name and appends the error, if any, to errs.
func defineCounter(name string, errs *[]error) abi.MetricCounter {
	m, err := abi.DefineCounterMetric(name)
	if err != nil {
		*errs = append(*errs, err)
	}
	return m
}

// joinErrors is errors.Join out of line (see doc.go).
//
//go:noinline
func joinErrors(errs []error) error {
	return errors.Join(errs...)
}

// placed records in the rule's metrics what a commit that placed a key did: a slot used for
// the first time, or an eviction and what it grants.
func (rs *ruleState) placed(p *sharedstate.Pending) {
	if p.Claimed {
		rs.m.slotsUsed.Add(1)
	}
	if p.Evicted {
		rs.m.evictions.Increment(1)
		if p.Granted > 0 {
			rs.m.evictionGranted.Increment(uint64(p.Granted))
		}
	}
}
