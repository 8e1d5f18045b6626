package filter

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// redisClient is the plugin's connection to webdis: the cluster, the breaker and the metrics.
type redisClient struct {
	cfg     *config.Redis
	headers abi.CalloutHeaders
	timeout uint32 // redis.timeout in whole milliseconds, rounded up: a callout's timeout
	breaker breaker
	gauge   breakerGauge // publishes the breaker's state process-wide
	m       redisMetrics
	body    []byte // scratch for request bodies; a callout copies it
	keys    []byte // the Redis keys of one call, back to back
	answers []redis.Answer
	callID  int64 // the VM's next call id (nextCallID), from a random start
	at      int64 // the instant on Redis' clock of the last answer parsed (callReplies, shardReply)

	// parts holds one breaker per partition when redis.partitions > 1 (each partition lives
	// on one shard), and openParts counts those that are open; the gauge says open while any
	// is.
	parts     []breaker
	openParts int

	// With partitions, secret is the key of the hash that places a key in its partition
	// (redis.Partition), known once secretKnown; secretDue is when the tick reads it again.
	// The one breaker above guards the calls that read it (the secret is in the domain's
	// slot, in no partition).
	secret      redis.Secret
	secretKnown bool
	secretDue   int64
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
		headers: abi.NewCalloutHeaders([][2]string{
			{":method", redis.Method}, {":path", redis.Path}, {":authority", cfg.Authority},
			{"content-type", redis.ContentType},
		}),
		timeout: uint32((cfg.Timeout + time.Millisecond - 1) / time.Millisecond),
		callID:  int64(rand.Uint64() & redis.MaxCallID),
		breaker: breaker{threshold: cfg.Breaker.Failures, cooldown: int64(cfg.Breaker.Cooldown),
			probeWait: int64(cfg.Timeout)},
	}
	if cfg.Partitions > 1 {
		c.parts = slices.Repeat([]breaker{c.breaker}, cfg.Partitions)
	}
	var errs []error
	counter := func(name string) abi.MetricCounter {
		return defineCounter("ratelimit_redis_"+name+"_total", &errs)
	}
	c.m = redisMetrics{
		calls: counter("calls"), skipped: counter("skipped"), unavailable: counter("unavailable"),
		timeouts: counter("timeouts"), errors: counter("errors"), malformed: counter("malformed"),
		resets: counter("resets"), noscript: counter("noscript"),
	}
	c.gauge.opened = counter("breaker_opened")
	var err error
	c.gauge.open, err = abi.DefineGaugeMetric("ratelimit_redis_breaker_open")
	errs = append(errs, err)
	c.m.latency, err = abi.DefineHistogramMetric("ratelimit_redis_latency_us")
	return c, errors.Join(append(errs, err)...)
}

// partition returns the partition of descriptor key: 0 without partitions.
func (c *redisClient) partition(key []byte) int {
	if c.cfg.Partitions <= 1 {
		return 0
	}
	return redis.Partition(&c.secret, key, c.cfg.Partitions)
}

// breakerOf returns the breaker of partition part, or the one breaker when part < 0 or the
// rules are not partitioned.
func (c *redisClient) breakerOf(part int) *breaker {
	if part < 0 || len(c.parts) == 0 {
		return &c.breaker
	}
	return &c.parts[part%len(c.parts)]
}

// recordLatency records a callout's round trip, sent at sentAt and answered at now, in
// microseconds; a clock that went backwards records nothing.
func (c *redisClient) recordLatency(sentAt, now int64) {
	if us := (now - sentAt) / 1000; us >= 0 {
		c.m.latency.Record(uint64(us))
	}
}

// countFailure counts a failed Redis call by kind.
func (c *redisClient) countFailure(err error) {
	se, isStatus := errors.AsType[*redis.StatusError](err) // not errors.As, which links reflection
	switch {
	case isStatus && se.Status == 504:
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
}

var (
	errCalloutReset = errors.New("callout reset")
	errNoHosts      = &wrappedError{err: redis.ErrUnavailable, suffix: ": the cluster has no host (proxy_http_call failed with InternalFailure)"}
)

// sendError classifies a callout that could not be sent: Envoy fails proxy_http_call with
// InternalFailure when the cluster has no host, and never calls back, so Redis is unavailable
// as surely as on a 503. Anything else stays unclassified and is counted as a reset.
func sendError(err error) error {
	if errors.Is(err, abi.ErrInternalFailure) {
		return errNoHosts
	}
	return err
}

func calloutStatus() int {
	s, err := abi.GetHttpCallResponseHeader(":status")
	switch {
	case err != nil:
		return 0
	case s == "200": // every answer of a script that ran: no number to parse
		return 200
	}
	return atoi(s)
}

// atoi parses a status code; anything else is 0.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// calloutBody reads the answer to a call of rules global rules. A script's result is at most
// 21 bytes per number (20 digits and a comma) for the four of the head and the six of each
// rule, with room for the JSON around them; an error reply carries Redis' message, often
// longer (Redis appends the script's sha and line to its own text, and MISCONF's is over 300
// bytes), so up to maxErrorReply bytes are read whatever the rules. A larger answer is neither,
// and what is read of it is malformed: a misrouted answer is not copied whole into the VM.
func calloutBody(size, rules int) []byte {
	if size <= 0 {
		return nil
	}
	b, err := abi.GetHttpCallResponseBody(0, min(size, max(64+21*(4+6*rules), maxErrorReply)))
	if err != nil {
		return nil
	}
	return b
}

// maxErrorReply is what calloutBody reads at least: an error reply with Redis' longest
// messages (a few hundred bytes) fits many times over.
const maxErrorReply = 4096
