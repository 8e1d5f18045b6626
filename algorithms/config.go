package algorithms

import (
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Algorithm names, as the JSON config spells them.
const (
	AlgTokenBucket   = "token_bucket"
	AlgLeakyBucket   = "leaky_bucket"
	AlgSlidingWindow = "sliding_window"
	AlgFixedWindow   = "fixed_window"
	AlgGCRA          = "gcra"
	AlgAdaptive      = "adaptive"
)

// The optional fields of a rule an algorithm may accept besides limit and window, by their
// JSON names (see Spec).
const (
	FieldBurst    = "burst"     // Config.Burst
	FieldVariant  = "variant"   // Config.Variant
	FieldMaxDelay = "max_delay" // Config.MaxDelay
	FieldAdaptive = "adaptive"  // the section of Config.MinLimit through DecreaseFactor
)

// Spec describes an algorithm once, for every place that needs to know it: New validates a
// Config against it, the config parser takes its list of algorithms and the fields each
// accepts from it, the Redis codec refuses a global rule of an algorithm without a global
// mode, and the schema test checks schema.json against it. Config.Capacity is the one
// capacity rule that goes with it.
type Spec struct {
	Name string // Config.Algorithm
	// Fields are the optional fields (Field constants) the algorithm accepts; every other one
	// must be absent (zero).
	Fields []string
	// Global reports whether the algorithm has a global mode (a Lua port that decides in
	// Redis). The adaptive limit has none: it is tuned from each proxy's own latency and
	// errors. The leaky bucket's shaper (MaxDelay > 0) has none either: its delays are local.
	Global bool
}

// Accepts reports whether the algorithm accepts the optional field (a Field constant).
func (s Spec) Accepts(field string) bool {
	for _, f := range s.Fields {
		if f == field {
			return true
		}
	}
	return false
}

// specs lists every algorithm, in the order of the documentation.
var specs = [...]Spec{
	{Name: AlgTokenBucket, Fields: []string{FieldBurst}, Global: true},
	{Name: AlgLeakyBucket, Fields: []string{FieldBurst, FieldMaxDelay}, Global: true},
	{Name: AlgSlidingWindow, Fields: []string{FieldVariant}, Global: true},
	{Name: AlgFixedWindow, Global: true},
	{Name: AlgGCRA, Fields: []string{FieldBurst}, Global: true},
	{Name: AlgAdaptive, Fields: []string{FieldAdaptive}},
}

// Specs returns the description of every algorithm. The slice is the caller's.
func Specs() []Spec {
	out := make([]Spec, len(specs))
	copy(out, specs[:])
	return out
}

// SpecOf returns the description of the algorithm named name, and false for an unknown name.
func SpecOf(name string) (Spec, bool) {
	for _, s := range specs {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

// Sliding window variants.
const (
	VariantCounter = "counter"
	VariantLog     = "log"
)

// Validation bounds, so that no accepted configuration can push an intermediate quantity past
// 2^53, the largest integer a Lua double holds exactly (nor so overflow an int64).
const (
	// MinWindow is the shortest accepted window. Shorter windows are not meaningful for
	// request rate limiting and would let very high rates overflow the scaled arithmetic.
	MinWindow = time.Millisecond
	// MaxWindow is the longest accepted window (31 days, so monthly quotas fit). Windows and
	// delays stay below 2^52 ns, leaving room for sums of two of them below 2^53.
	MaxWindow = 31 * 24 * time.Hour
	// LimitCeiling bounds Limit, Burst, MinLimit and MaxLimit. Counts then fit in 32 bits and
	// the sliding-window-counter products (3 * limit * 10^6) stay below 2^53.
	LimitCeiling = 1_000_000_000
	// LogLimitCeiling bounds Limit for the sliding window log, whose state holds one timestamp
	// delta per admitted event in the window and is copied on every request: 1024 events is
	// about 4 KiB of state with windows up to 4.29 s and 8 KiB above.
	LogLimitCeiling = 1024
	// MaxExact is 2^53: every quantity that is not an absolute timestamp stays at or below it,
	// and every floor division a/b has a+b <= MaxExact.
	MaxExact = 1 << 53
	// MaxTime is the largest instant the limiters work with (2^62 ns after the Unix epoch,
	// about the year 2116). now is clamped to [0, MaxTime].
	MaxTime = 1 << 62
	// maxStamp bounds the absolute timestamps a decoded state may hold: MaxTime plus the
	// longest schedule a limiter keeps ahead of now (a GCRA TAT or a shaper release).
	maxStamp = MaxTime + MaxExact
)

// Config names an algorithm and its parameters. Limit events per Window; Burst is the bucket
// capacity / GCRA burst (0 means Limit). Fields that an algorithm does not use must be left
// zero: New rejects them so that a misplaced setting is reported instead of silently ignored.
type Config struct {
	Algorithm string // one of the Alg constants
	// Limit is the number of events allowed per Window (for adaptive, the initial limit of a
	// fresh controller), Window a whole number of milliseconds in [MinWindow, MaxWindow].
	Limit  int64
	Window time.Duration
	// Burst is the bucket capacity (token_bucket, leaky_bucket) or the GCRA burst; 0 means
	// Limit. Other algorithms reject it.
	Burst   int64
	Variant string // sliding_window: VariantCounter (the default) or VariantLog
	// MaxDelay (leaky_bucket only) turns on shaping when > 0: a request that finds the bucket
	// busy is allowed with a Delay instead of being denied, as long as the delay is at most
	// MaxDelay (and the queue holds at most Burst events). Values above the time to drain a
	// full queue (Burst*Window/Limit) behave like that time.
	MaxDelay time.Duration

	// MinLimit (adaptive) is the floor of the adaptive limit, >= 1; MaxLimit its ceiling, 0
	// meaning Limit.
	MinLimit, MaxLimit int64
	// TargetLatency (adaptive): an interval whose mean latency exceeds it is unhealthy.
	// 0 turns the latency signal off.
	TargetLatency time.Duration
	// ErrorThreshold (adaptive): an interval whose error ratio (errors/requests) exceeds it is
	// unhealthy; a fraction in [0, 1], 0 turns the error signal off. It is used with a
	// resolution of one part per million.
	ErrorThreshold float64
	// AdjustInterval (adaptive) is the minimum time between two limit adjustments; signals
	// reported in between are accumulated. 0 means Window.
	AdjustInterval time.Duration
	// MinSamples (adaptive) is the number of requests an interval needs before it can be judged
	// unhealthy; quieter intervals count as healthy. 0 means DefaultMinSamples.
	MinSamples int64
	// IncreaseStep (adaptive) is the additive increase per healthy interval; 0 means
	// max(1, MaxLimit/20), so the limit climbs from its floor to its ceiling in at most about
	// 20 healthy intervals.
	IncreaseStep int64
	// DecreaseFactor (adaptive) is the multiplicative decrease per unhealthy interval, in
	// (0, 1); 0 means DefaultDecreaseFactor. It is used with a resolution of one part per
	// million.
	DecreaseFactor float64
}

// Adaptive defaults, for Config.MinSamples and Config.DecreaseFactor 0.
const (
	DefaultMinSamples     = 10
	DefaultDecreaseFactor = 0.9
)

// Decision is the outcome of one AllowN call.
type Decision struct {
	Allowed bool // the n events may pass
	// Limit is the configured limit (events per window; for adaptive, the limit in force),
	// Remaining how many events may still pass at now after this decision (never negative).
	Limit, Remaining int64
	// RetryAfter is 0 when allowed; when denied, the earliest wait after which the same
	// request would be allowed if nothing else arrives. A denial with RetryAfter == 0 means
	// the request can never be allowed (see Unsatisfiable).
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to its full allowance.
	ResetAfter time.Duration
	// Delay is set by the leaky-bucket shaper only: the request is allowed, but must be
	// released after Delay so that the released stream leaves at the leak rate.
	Delay time.Duration
}

// Unsatisfiable reports whether the request was denied because it can never be allowed:
// n <= 0, or n greater than the limiter's capacity. Such a denial carries RetryAfter == 0,
// whereas every other denial has RetryAfter >= 1ns.
func (d Decision) Unsatisfiable() bool { return !d.Allowed && d.RetryAfter == 0 }

// Limiter is one configured rate-limiting algorithm. Implementations are immutable after New
// and safe for concurrent use; the per-key state lives in the caller's byte slices.
type Limiter interface {
	// AllowN decides whether n events may pass at now (Unix nanoseconds), given the encoded
	// state of the key (nil: a fresh key), and returns the state to store. The returned slice
	// aliases state when cap(state) >= StateSize(); see the package documentation.
	AllowN(state []byte, now int64, n int64) (Decision, []byte)
	// StateSize is the largest encoded state this limiter produces, so callers can
	// preallocate buffers and get zero allocations per call.
	StateSize() int
	// Idle reports whether state is equivalent to a fresh key at now (full allowance, and
	// every later call behaves as for a fresh key), so its storage slot can be reclaimed.
	// Undecodable state is idle.
	Idle(state []byte, now int64) bool
}

// ConfigError is the error New returns. Field is the snake_case JSON name of the offending
// field ("limit", "window", "burst", ...); Message says what is wrong with it, including the
// value given. Error() renders "field: message", ready to be prefixed with a JSON path such as
// "rules[2].".
type ConfigError struct {
	Field, Message string
}

// Error renders "field: message".
func (e *ConfigError) Error() string { return e.Field + ": " + e.Message }

func cfgErr(field, msg string) error {
	return &ConfigError{Field: field, Message: msg}
}

// New validates c and returns the limiter it describes. Every bad field yields a *ConfigError
// naming it; the first problem found is reported.
func New(c Config) (Limiter, error) {
	switch c.Algorithm {
	case AlgTokenBucket:
		return newLimiter[TokenBucket](c)
	case AlgLeakyBucket:
		return newLimiter[LeakyBucket](c)
	case AlgSlidingWindow:
		switch c.Variant {
		case "", VariantCounter:
			return newLimiter[SlidingWindowCounter](c)
		case VariantLog:
			return newLimiter[SlidingWindowLog](c)
		}
	case AlgFixedWindow:
		return newLimiter[FixedWindow](c)
	case AlgGCRA:
		return newLimiter[GCRA](c)
	case AlgAdaptive:
		return NewAdaptive(c)
	}
	return nil, unknownAlgorithm(c)
}

// newLimiter returns a new limiter of type T set up by its init.
func newLimiter[T any, P interface {
	*T
	init(Config) error
}](c Config) (P, error) {
	l := P(new(T))
	if err := l.init(c); err != nil {
		return nil, err
	}
	return l, nil
}

// unknownAlgorithm is New's error for a configuration that names no algorithm or variant it
// knows.
func unknownAlgorithm(c Config) error {
	switch c.Algorithm {
	case AlgSlidingWindow:
		return cfgErr("variant", "unknown "+strconv.Quote(c.Variant)+" (want "+strconv.Quote(VariantCounter)+" or "+strconv.Quote(VariantLog)+")")
	case "":
		return cfgErr("algorithm", "missing (want one of "+algorithmList()+")")
	}
	return cfgErr("algorithm", "unknown "+strconv.Quote(c.Algorithm)+" (want one of "+algorithmList()+")")
}

// algorithmList names every algorithm, for error messages. It is built when an error needs
// it rather than in the package initialiser, which V8 compiles and runs in every VM's start.
func algorithmList() string {
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}

// validateCommon checks the fields every algorithm uses (limit, window) and rejects the fields
// that the algorithm's Spec does not accept.
func validateCommon(c Config, maxLimit int64) error {
	spec, _ := SpecOf(c.Algorithm)
	if commonValid(c, maxLimit, spec) {
		return nil
	}
	return commonError(c, maxLimit, spec)
}

// commonValid reports whether commonError finds nothing wrong with c, without building an
// error: a valid configuration is the common case, and the error messages' formatting code
// (most of commonError) is compiled only for a configuration that needs it (see
// filter/doc.go). TestCommonValidAgreesWithCommonError checks the two agree.
func commonValid(c Config, maxLimit int64, spec Spec) bool {
	return c.Limit > 0 && c.Limit <= maxLimit &&
		c.Window >= MinWindow && c.Window <= MaxWindow && c.Window%time.Millisecond == 0 &&
		(spec.Accepts(FieldBurst) || c.Burst == 0) &&
		(!spec.Accepts(FieldBurst) || c.Burst >= 0 && c.Burst <= LimitCeiling) &&
		(c.Variant == "" || spec.Accepts(FieldVariant)) &&
		(spec.Accepts(FieldMaxDelay) || c.MaxDelay == 0) &&
		(spec.Accepts(FieldAdaptive) || c.MinLimit == 0 && c.MaxLimit == 0 && c.TargetLatency == 0 &&
			c.ErrorThreshold == 0 && c.AdjustInterval == 0 && c.MinSamples == 0 && c.IncreaseStep == 0 &&
			c.DecreaseFactor == 0)
}

// commonError returns the first problem validateCommon reports for c (nil when there is none).
func commonError(c Config, maxLimit int64, spec Spec) error {
	if c.Limit <= 0 {
		return cfgErr("limit", "must be > 0, got "+strconv.FormatInt(c.Limit, 10))
	}
	if c.Limit > maxLimit {
		if maxLimit == LogLimitCeiling {
			return cfgErr("limit", "must be <= "+strconv.FormatInt(maxLimit, 10)+" for the sliding window log (its state stores one timestamp per event), got "+
				strconv.FormatInt(c.Limit, 10)+"; use the counter variant for larger limits")
		}
		return cfgErr("limit", "must be <= "+strconv.FormatInt(maxLimit, 10)+", got "+strconv.FormatInt(c.Limit, 10))
	}
	if err := validateWindow("window", c.Window); err != nil {
		return err
	}
	if !spec.Accepts(FieldBurst) && c.Burst != 0 {
		return cfgErr("burst", "not used by "+c.Algorithm+", must be 0 or absent, got "+strconv.FormatInt(c.Burst, 10))
	}
	if spec.Accepts(FieldBurst) && (c.Burst < 0 || c.Burst > LimitCeiling) {
		return cfgErr("burst", "must be in [0, "+strconv.Itoa(LimitCeiling)+"] (0 means limit), got "+strconv.FormatInt(c.Burst, 10))
	}
	if c.Variant != "" && !spec.Accepts(FieldVariant) {
		return cfgErr("variant", "only sliding_window has variants, got "+strconv.Quote(c.Variant)+" for "+c.Algorithm)
	}
	if !spec.Accepts(FieldMaxDelay) && c.MaxDelay != 0 {
		return cfgErr("max_delay", "only leaky_bucket can delay requests, must be 0 or absent for "+c.Algorithm+", got "+c.MaxDelay.String())
	}
	if spec.Accepts(FieldAdaptive) {
		return nil
	}
	for _, f := range [...]struct {
		name string
		set  bool
	}{{"min_limit", c.MinLimit != 0}, {"max_limit", c.MaxLimit != 0}, {"target_latency", c.TargetLatency != 0},
		{"error_threshold", c.ErrorThreshold != 0}, {"adjust_interval", c.AdjustInterval != 0},
		{"min_samples", c.MinSamples != 0}, {"increase_step", c.IncreaseStep != 0}, {"decrease_factor", c.DecreaseFactor != 0}} {
		if f.set {
			return cfgErr(f.name, "only adaptive uses it, must be absent for "+c.Algorithm)
		}
	}
	return nil
}

func validateWindow(field string, w time.Duration) error {
	switch {
	case w < MinWindow:
		return cfgErr(field, "must be >= "+MinWindow.String()+", got "+w.String())
	case w > MaxWindow:
		return cfgErr(field, "must be <= "+MaxWindow.String()+" (31 days), got "+w.String())
	case w%time.Millisecond != 0:
		// Whole milliseconds keep window alignment exact in the Lua port (see the package
		// documentation) and make Window/10^6 an integer for the sliding window counter.
		return cfgErr(field, "must be a whole number of milliseconds, got "+w.String())
	}
	return nil
}

// Capacity returns the largest cost a fresh key admits at once: Burst, or Limit when Burst is
// 0. It is the bucket size of the token bucket and the leaky bucket, the burst tolerance of
// GCRA (ITU-T I.371) in cells, and Limit for the window algorithms, whose Burst is always 0.
// For adaptive it is the starting limit only: the limit in force moves between MinLimit and
// MaxLimit. The config parser, the Redis script arguments and the limiters all use this one
// rule.
func (c Config) Capacity() int64 {
	if c.Burst == 0 {
		return c.Limit
	}
	return c.Burst
}

// CapacityField names the field that sets Capacity ("burst", else "limit"), for error
// messages about the capacity.
func (c Config) CapacityField() string {
	if c.Burst == 0 {
		return "limit"
	}
	return "burst"
}

// rateScale splits the rate Limit/Window into the coprime pair (lg, wg) = (Limit/g, Window/g)
// with g = gcd(Limit, Window in ns). Measuring an amount of events in units of 1/wg of an event
// makes the refill exactly lg units per nanosecond, so buckets need no division on refill
// and no rounding at all.
func rateScale(limit int64, window time.Duration) (lg, wg int64) {
	g := GCD(limit, int64(window))
	return limit / g, int64(window) / g
}

// sumProducts returns sum(a[i]*b[i]) for non-negative terms, and false when the sum exceeds
// MaxExact (computed without overflow, so huge configurations are reported, not wrapped).
func sumProducts(terms ...[2]int64) (int64, bool) {
	var sum uint64
	for _, t := range terms {
		hi, lo := bits.Mul64(uint64(t[0]), uint64(t[1]))
		if hi != 0 || lo > MaxExact || sum+lo > MaxExact {
			return 0, false
		}
		sum += lo
	}
	return int64(sum), true
}

// checkExact returns a *ConfigError for field when sum(a[i]*b[i]), an intermediate quantity
// of the exact arithmetic described by what, can exceed MaxExact.
func checkExact(field, what, hint string, terms ...[2]int64) error {
	if _, ok := sumProducts(terms...); ok {
		return nil
	}
	return exactError(field, what, hint, terms)
}

// exactError is checkExact's error.
func exactError(field, what, hint string, terms [][2]int64) error {
	var est float64
	for _, t := range terms {
		est += float64(t[0]) * float64(t[1])
	}
	return cfgErr(field, what+" = "+strconv.FormatFloat(est, 'g', 4, 64)+" exceeds 2^53 = "+strconv.FormatInt(MaxExact, 10)+
		", the largest integer the exact arithmetic (and its Lua port) can hold; "+hint)
}
