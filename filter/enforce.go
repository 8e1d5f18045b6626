package filter

import (
	"hash/fnv"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// Gradual enforcement (enforce_percent). A rule whose enforce_percent is below 100 enforces its
// denials on that share of requests only; on the others it is decided as a shadow rule (its
// denial counted as shadow_denied, charging nothing). Its state, counts and headers are its own.
//
// A request's sample, a number in [0, config.EnforceAll), is taken from x-request-id, so a
// request keeps its fate however often it is decided; a rule enforces the request when the
// sample is below its EnforcePPM. Every rule reads the same sample, so a larger share enforces
// every request a smaller one does, and raising a share only adds requests.

// weylStep is the step of the sequence a worker gives the requests without an x-request-id:
// the n-th one's sample is n × weylStep mod config.EnforceAll. It is the golden ratio's
// fractional part in parts per million, made odd (coprime to 10^6): the sequence visits every
// sample once per 10^6 requests, and any run of requests fills [0, 10^6) about evenly.
const weylStep = 618_033

// enforcing returns the state the request is decided on for rs, a rule with an
// enforce_percent below 100: rs itself when the rule enforces the request, else its
// unenforced twin. The request's sample, taken once, is the FNV-1a hash (64 bits) of its
// x-request-id modulo config.EnforceAll, or without one the worker's next value of the
// sequence of weylStep.
func (p *plugin) enforcing(rs *ruleState) *ruleState {
	r := &p.req
	if r.fetched&fetchedSample == 0 {
		r.fetched |= fetchedSample
		if id, ok := r.Header("x-request-id"); ok && id != "" {
			h := fnv.New64a()
			h.Write([]byte(id))
			r.sample = uint32(h.Sum64() % config.EnforceAll)
		} else {
			p.unsampled = (p.unsampled + weylStep) % config.EnforceAll
			r.sample = uint32(p.unsampled)
		}
	}
	if r.sample < rs.rule.EnforcePPM {
		return rs
	}
	return rs.unenforced
}

// unenforcedTwin returns the state of rs for a request it does not enforce: rs with a shadow
// copy of its rule that shows its headers, sharing its tables, Redis arguments and metrics,
// with no lease or over-limit cache (its decisions are exact), and its overrides' twins.
func (rs *ruleState) unenforcedTwin() *ruleState {
	r := *rs.rule
	r.Shadow, r.ShadowHeaders = true, true
	twin := *rs
	twin.rule, twin.unenforced, twin.lease, twin.overLimit = &r, nil, nil, nil
	if len(rs.overrides) > 0 {
		twin.overrides = make([]*ruleState, len(rs.overrides))
		for j, o := range rs.overrides {
			if o != nil {
				twin.overrides[j] = o.unenforcedTwin()
			}
		}
	}
	return &twin
}
