package filter

import (
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// An admitted request is near the limit when it leaves more than near_limit_ratio of the
// rule's capacity (burst, or limit) used, as envoyproxy/ratelimit counts its near_limit stat;
// ratelimit_near_limit_total shows a limit being approached before it denies anyone.

// nearRemaining returns the remaining allowance below which an admission under r is near the
// limit: capacity - floor(near_limit_ratio × capacity). A ratio of 1 counts nothing.
func nearRemaining(r *config.Rule) int64 {
	c := r.Algorithm.Capacity()
	return c - int64(r.NearLimitRatio*float64(c))
}

// countNearLimit counts the admission d in the rule's near_limit counter when it is near the
// limit. An adaptive rule's capacity is the limit in force, which d states.
func (rs *ruleState) countNearLimit(d *algorithms.Decision) {
	below := rs.nearRemaining
	if rs.adaptive != nil {
		below = d.Limit - int64(rs.rule.NearLimitRatio*float64(d.Limit))
	}
	if d.Remaining < below {
		rs.m.nearLimit.Increment(1)
	}
}
