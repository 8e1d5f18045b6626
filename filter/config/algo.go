package config

import (
	"errors"
	"strconv"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// checkAlgorithm validates the rule's limiter parameters and builds its limiter. It returns
// the offending field (relative to the rule) and a message, or "" when the limiter was
// built. Package algorithms owns the rules for its parameters: algorithms.New decides, and
// its *algorithms.ConfigError names the field, mapped back to the config's JSON path. The
// one check made here is about the cost, which package algorithms does not see.
func checkAlgorithm(r *Rule) (field, msg string) {
	lim, err := algorithms.New(r.Algorithm)
	if err != nil {
		return algorithmError(err)
	}
	r.Limiter = lim
	if r.CostSpec.Usage != nil {
		return checkUsage(r)
	}
	// A valid limiter's capacity is at least 1, so only a cost above 1 (a constant, or a cost
	// header's max) can exceed it; most rules cost 1.
	if r.CostSpec.Constant > 1 || r.CostSpec.Max > 1 {
		return checkCost(r, "cost")
	}
	return "", ""
}

// checkCost checks the rule's constant cost, or its cost header's max, at the rule's field at,
// against its limiter's capacity. A request costing more is never admitted (a
// denial without a Retry-After, since no wait helps): always a mistake in the config, not a
// policy. An adaptive rule's bound is its max_limit, above which no request is ever admitted.
func checkCost(r *Rule, at string) (field, msg string) {
	capacity, from := r.Algorithm.Capacity(), r.Algorithm.CapacityField()
	if r.Algorithm.Algorithm == algorithms.AlgAdaptive && r.Algorithm.MaxLimit > 0 {
		capacity, from = max(r.Algorithm.MaxLimit, r.Algorithm.Limit), "adaptive.max_limit"
	}
	switch cs := r.CostSpec; {
	case cs.Header == "" && cs.Constant > capacity:
		return at, costAboveCapacity(cs.Constant, capacity, from)
	case cs.Header != "" && cs.Max > capacity:
		return at + ".max", maxCostAboveCapacity(cs.Max, capacity, from)
	}
	return "", ""
}

// algorithmError returns the field and message of algorithms.New's error.
func algorithmError(err error) (field, msg string) {
	if ce, ok := errors.AsType[*algorithms.ConfigError](err); ok {
		return algorithmField(ce.Field), ce.Message
	}
	return "algorithm", err.Error()
}

// costAboveCapacity is the message for a constant cost above the rule's capacity.
func costAboveCapacity(cost, capacity int64, from string) string {
	return "every request costs " + strconv.FormatInt(cost, 10) +
		", more than the rule ever allows (" + from + " " + strconv.FormatInt(capacity, 10) + ")"
}

// maxCostAboveCapacity is the message for a cost header's max above the rule's capacity.
func maxCostAboveCapacity(cost, capacity int64, from string) string {
	return "a request with the header at " + strconv.FormatInt(cost, 10) +
		" (or an invalid value) would never be admitted: the rule allows at most " +
		strconv.FormatInt(capacity, 10) + " (" + from + "); lower max to at most that"
}

// algorithmField maps a field name of algorithms.Config errors to the rule's JSON path.
func algorithmField(f string) string {
	switch f {
	case "min_limit", "max_limit", "target_latency", "error_threshold", "min_samples", "increase_step", "decrease_factor":
		return "adaptive." + f
	case "adjust_interval":
		return "adaptive.interval"
	case "":
		return "algorithm"
	}
	return f
}
