package filtertest

import "fmt"

// RedisOpts is the "redis" block of a test configuration.
type RedisOpts struct {
	Timeout     string // callout timeout
	FailureMode string // allow, deny or local
	Failures    int    // breaker threshold
	Cooldown    string
	Partitions  int    // redis.partitions; 0 leaves it out (the default, 1)
	KeyPrefix   string // redis.key_prefix; "" is "rl"
}

// GlobalConfig renders a configuration with one redis block (cluster "webdis", key prefix
// "rl" unless o says otherwise) and the given rules (a JSON array). The breaker defaults to its maximum threshold so
// that tests that are not about the breaker never trip it.
func GlobalConfig(o RedisOpts, rules string) string {
	if o.Timeout == "" {
		o.Timeout = "2s"
	}
	if o.FailureMode == "" {
		o.FailureMode = "deny"
	}
	if o.Failures == 0 {
		o.Failures = 1000
	}
	if o.Cooldown == "" {
		o.Cooldown = "10s"
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "rl"
	}
	parts := ""
	if o.Partitions > 0 {
		parts = fmt.Sprintf(`"partitions":%d,`, o.Partitions)
	}
	return fmt.Sprintf(`{"rate_limit_headers":"both","redis":{"cluster":"webdis","authority":"webdis.test",
		"timeout":%q,"key_prefix":%q,%s"failure_mode":%q,"breaker":{"failures":%d,"cooldown":%q}},
		"rules":%s}`, o.Timeout, o.KeyPrefix, parts, o.FailureMode, o.Failures, o.Cooldown, rules)
}
