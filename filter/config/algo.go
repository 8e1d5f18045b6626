package config

import (
	"errors"
	"strconv"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// checkAlgorithm validates the rule's limiter parameters and builds its limiter. It returns
// the offending field (relative to the rule) and a message, or "" when the limiter was
// built.
//
// Package algorithms owns the exact rules for its parameters (bounds that keep its integer
// arithmetic and the Redis Lua port exact, whole-millisecond windows, the log variant's
// size, ...), so the config does not duplicate them: algorithms.New decides, and its
// *algorithms.ConfigError names the field, which is mapped back to the config's JSON path.
// The one check made here is about the cost, which package algorithms does not see.
func checkAlgorithm(r *Rule) (field, msg string) {
	lim, err := algorithms.New(r.Algorithm)
	if err != nil {
		if ce, ok := errors.AsType[*algorithms.ConfigError](err); ok {
			return algorithmField(ce.Field), ce.Message
		}
		return "algorithm", err.Error()
	}
	r.Limiter = lim
	// A constant cost above the capacity would deny every request: algorithms reports such
	// a request as unsatisfiable. That is always a mistake in the config, not a policy.
	// (Adaptive is left out: its capacity moves, and a cost header is bounded by max.)
	if r.CostSpec.Header == "" && r.Algorithm.Algorithm != algorithms.AlgAdaptive {
		capacity, from := r.Algorithm.Capacity(), r.Algorithm.CapacityField()
		if r.CostSpec.Constant > capacity {
			return "cost", "every request costs " + strconv.FormatInt(r.CostSpec.Constant, 10) +
				", more than the rule ever allows (" + from + " " + strconv.FormatInt(capacity, 10) + ")"
		}
	}
	return "", ""
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
