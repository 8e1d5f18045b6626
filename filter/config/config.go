// Package config parses, validates and compiles the filter's JSON configuration, and holds
// the per-request logic that only depends on the config: which rules apply to a request,
// the key each rule counts under, and what a request costs.
//
// The package makes no proxy-wasm calls. The filter reads request attributes through the
// Request interface, so the same code runs in the wasm module, under the SDK's emulator and
// in plain unit tests and fuzzers.
//
// Parse is called once per proxy_on_configure; it either returns a fully validated Config
// or every problem it found, each with the JSON path of the bad value. Nothing that Parse
// accepted can fail later on the request path: Match, AppendKey and Cost never return
// errors and never panic.
package config

import (
	"regexp"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// Bounds that keep a mistaken or hostile config from costing unbounded memory or time in
// every worker VM.
const (
	MaxConfigBytes  = 1 << 20 // the whole JSON document
	MaxRules        = 256
	maxNameLen      = 64   // rule names and the domain: they appear in metric names and keys
	maxRegexLen     = 1024 // regex source, before compilation
	maxStringLen    = 1024 // other strings: route names, header values, defaults, constants
	MaxListLen      = 256  // routes, virtual_hosts
	MaxMethods      = 32
	MaxHeaderConds  = 32 // match.headers
	MaxKeyParts     = 16
	maxDenyHeaders  = 32
	maxBodyLen      = 8 << 10
	maxCost         = 1_000_000
	MaxKeysPerRule  = 1_000_000
	maxShapingDelay = 60 * time.Second
)

// The range of max_key_bytes (see Config.MaxKeyBytes).
const (
	MinKeyBytes = 16
	MaxKeyBytes = 64 << 10
)

// Defaults applied when a field is absent.
const (
	defaultDomain           = "rl"
	defaultCASAttempts      = 8
	defaultMaxKeys          = 10000
	defaultMaxKeyBytes      = 1024
	defaultDenyStatus       = 429
	defaultDenyBody         = `{"error":"rate_limited","rule":"%RULE%","retry_after":%RETRY_AFTER%}`
	defaultRedisTimeout     = 50 * time.Millisecond
	defaultKeyPrefix        = "rl"
	defaultBreakerFails     = 5
	defaultCooldown         = 5 * time.Second
	defaultAdaptiveInterval = time.Second
	defaultErrorThreshold   = 0.05
	// DefaultNearLimitRatio is the share of a rule's capacity above which an admitted request
	// counts as near the limit, as in envoyproxy/ratelimit (NEAR_LIMIT_RATIO).
	DefaultNearLimitRatio = 0.8
	// EnforceAll is Rule.EnforcePPM for a rule that enforces every denial.
	EnforceAll = 1_000_000
)

// FailureMode says what to do with a request when the limiter's state cannot be read or
// written (CAS attempts exhausted, store error). Either way it is counted and logged.
type FailureMode string

const (
	FailAllow FailureMode = "allow" // let the request through
	FailDeny  FailureMode = "deny"  // reject it as if the limit were exceeded
)

// RedisFailureMode says what a global rule does when Redis cannot answer (timeout, error
// response, open circuit breaker).
type RedisFailureMode string

const (
	RedisFailAllow RedisFailureMode = "allow" // let the request through
	RedisFailDeny  RedisFailureMode = "deny"  // reject it
	RedisFailLocal RedisFailureMode = "local" // decide with the rule's limit on this proxy's local state
)

// HeadersMode selects which rate-limit response headers are sent.
type HeadersMode string

const (
	HeadersDraft  HeadersMode = "draft"  // IETF draft RateLimit and RateLimit-Policy fields
	HeadersLegacy HeadersMode = "legacy" // X-RateLimit-Limit, -Remaining, -Reset
	HeadersBoth   HeadersMode = "both"   // both sets
	HeadersNone   HeadersMode = "none"   // no rate-limit headers, and no Retry-After
)

// Scope says where a rule's state lives.
type Scope string

const (
	ScopeLocal  Scope = "local"  // Envoy shared data: one count per proxy, shared by its workers
	ScopeGlobal Scope = "global" // Redis: one count across every proxy
)

// Mode says whether a leaky bucket rejects excess requests or delays them.
type Mode string

const (
	ModeMeter Mode = "meter" // allow or deny at once
	ModeShape Mode = "shape" // delay requests up to MaxDelay to smooth them to the leak rate
)

// Source names where a key part's value comes from.
type Source string

const (
	SourceClientIP Source = "client_ip" // the client IP (see ClientIP), optionally masked to a prefix
	SourceHeader   Source = "header"    // a request header's value (multiple lines joined by ",")
	SourceQuery    Source = "query"     // a query parameter's percent-decoded value (first occurrence)
	SourcePath     Source = "path"      // :path without its query string
	SourceMethod   Source = "method"    // :method
	SourceRoute    Source = "route"     // xds.route_name
	SourceConst    Source = "const"     // a constant from the config
)

// Config is a parsed, validated and compiled configuration. It is immutable after Parse
// and safe to share.
type Config struct {
	// Domain namespaces every state key, so that two plugins sharing a vm_id (and so one
	// shared-data store) or one Redis do not count into each other's keys.
	Domain      string
	FailureMode FailureMode // when local state cannot be read or written
	CASAttempts int         // bounds the compare-and-swap retries on shared data
	TrustedHops int         // how ClientIP reads X-Forwarded-For
	// The defaults of the rules' fields of the same names; each Rule carries its effective
	// value.
	RateLimitHeaders HeadersMode
	Deny             *Deny
	MaxKeys          int // distinct keys per rule
	EnforcePercent   float64
	NearLimitRatio   float64
	// MaxKeyBytes bounds the length of a rule's key for a request (Rule.AppendKey's bytes: the
	// parts' values with their length prefixes). A longer key is refused with 431 before the
	// rule is decided (a shadow rule skips the request instead), so that what a request costs
	// does not grow with the length of the values a client sends: the key's digest, its copy
	// and, for a global rule, its Redis key are all bounded by it.
	MaxKeyBytes int
	// Redis configures global rules; nil when the config has no redis section.
	Redis *Redis
	// FilterState makes the filter set the deciding rule and the decision of every decided
	// request as stream properties, which Envoy keeps in the request's filter state for its
	// access log (see the filter's filterstate.go).
	FilterState bool
	// Rules in config order, which is evaluation order.
	Rules []*Rule
}

// Redis configures the Redis (webdis over HTTP callouts) store used by global rules.
type Redis struct {
	Cluster     string           // Envoy cluster that reaches webdis
	Authority   string           // :authority of the callout; defaults to Cluster
	Timeout     time.Duration    // per callout
	KeyPrefix   string           // prepended to every Redis key
	FailureMode RedisFailureMode // what a global rule does when Redis cannot answer
	Breaker     Breaker          // when to stop asking a failing Redis, and for how long

	// Partitions is how many hash tags each global rule's keys are spread over (1..1024,
	// default 1). 1: every key of the domain is on one slot and a request's global rules are
	// one all-or-nothing call. More: a rule's keys spread over the shards of a sharded store
	// (twemproxy, Redis Cluster), and each global rule of a request is its own call (see
	// package redis, "Keys", and filter/global.go).
	Partitions int
}

// Breaker is the circuit breaker in front of Redis: after Failures consecutive failures,
// Redis is not called for Cooldown and the failure mode applies at once.
type Breaker struct {
	Failures int
	Cooldown time.Duration
}

// Header is one response header name (lower-case) and value.
type Header struct{ Name, Value string }

// Deny is the local response sent when a request is rate limited.
type Deny struct {
	Status      int      // HTTP status of the local response
	Body        string   // the template as configured; see AppendBody
	ContentType string   // content-type of the local response
	Headers     []Header // sorted by name
	// EnvoyRateLimited adds "x-envoy-ratelimited: true" to the denial, as Envoy's own
	// rate-limit filters do: the router's envoy-ratelimited retry policy reads it. Default on.
	EnvoyRateLimited bool
	// GrpcStatus is the gRPC status a gRPC request (content-type application/grpc...) is
	// denied with, without a body: 8 RESOURCE_EXHAUSTED (default) or 14 UNAVAILABLE, the two
	// Envoy's local_ratelimit can answer.
	GrpcStatus int
	body       []bodyPart
}

// Rule is one compiled rule.
type Rule struct {
	Index int // the rule's position in the config's rules list
	// Name is unique in the config and limited to [A-Za-z0-9_.-]{1,64}, so it can be used
	// in metric names, state keys and deny bodies without escaping.
	Name        string
	Description string // free text for people; the filter ignores it
	Match       Match  // the request conditions; a zero Match matches every request
	// Key is the ordered list of descriptor parts; empty means one key for the rule. A rule
	// returned by Parse records what each part's Source is, so its parts must not be replaced
	// in place afterwards (build a new Rule instead).
	Key []KeyPart

	// Algorithm is the limiter's configuration, validated by algorithms.New; for adaptive
	// rules Limit is the starting limit.
	Algorithm algorithms.Config
	// Limiter is the limiter built from Algorithm, immutable and shared by every request
	// (type-assert *algorithms.Adaptive for the adaptive controller).
	Limiter algorithms.Limiter
	// Mode is ModeShape for a shaping leaky bucket (Algorithm.MaxDelay > 0), else ModeMeter.
	Mode Mode

	CostSpec CostSpec // what one request costs; see Cost
	Shadow   bool     // decide and count but never deny
	// ShadowHeaders lets a shadow rule's rate-limit headers reach clients. Off by default:
	// a client that honours them would slow down for a limit nobody enforces.
	ShadowHeaders bool
	// ShadowRequestHeader, when set, is a request header (lower case) added to the request
	// sent upstream, with the rule's name as value, when the shadow rule would have denied it.
	ShadowRequestHeader string
	// EnforcePercent is the percentage of requests (0 to 100) on which an enforced rule's
	// denials are enforced; EnforcePPM is the same in parts per million, EnforceAll for every
	// request. A request outside the share is decided as by a shadow rule (see the filter's
	// enforce.go). 100 for a shadow rule, which enforces nothing anyway.
	EnforcePercent float64
	EnforcePPM     uint32
	// NearLimitRatio is the share of the rule's capacity above which an admitted request is
	// counted as near the limit (ratelimit_near_limit_total).
	NearLimitRatio float64
	// Overrides give key values of their own a limit of their own (see Override); exact
	// values first in OverrideFor's search, prefixes longest first.
	Overrides []Override
	Continue  bool  // evaluation goes on to later rules after this one applies
	Scope     Scope // where the rule's state lives: this proxy, or Redis

	// Effective values: the rule's own, or the top-level value.
	MaxKeys          int
	Deny             *Deny
	RateLimitHeaders HeadersMode

	// Lease is the rule's lease block, nil without one (every request decided on the state).
	Lease *Lease

	trustedHops int          // the Config's, kept on the rule so AppendKey can find the client IP
	keyKinds    []sourceKind // the kind of each key part's Source, set by the parser
	keyGroup    int          // 1 + the Index of the first rule with the same key parts (see SameKey), or 0
}

// SameKey reports whether r and other build the same key for every request: their key parts
// are identical (rules counting one client over several windows, say). A request's key can
// then be built once for both. Only rules of one Parse compare equal.
func (r *Rule) SameKey(other *Rule) bool { return r.keyGroup != 0 && r.keyGroup == other.keyGroup }

// CostSpec says what a request costs. With Header empty every request costs Constant.
// Otherwise the cost is read from the request header Header (see Rule.Cost).
type CostSpec struct {
	Constant int64
	Header   string
	Default  int64 // cost when the header is absent
	Max      int64 // cost when the header is invalid or larger than Max
	// Usage, when set, makes the cost above a reservation (see UsageSpec).
	Usage *UsageSpec
}

// KeyPart is one descriptor part of a rule's key.
type KeyPart struct {
	Source Source // where the part's value comes from
	Name   string // the header name (lower-case) or the query parameter name
	Value  string // the constant for SourceConst
	// Default replaces a missing value when HasDefault is set; without a default a missing
	// part makes the rule skip the request.
	Default    string
	HasDefault bool
	// IPv4Prefix and IPv6Prefix aggregate client addresses into networks (for example 24
	// and 64), so that one client cannot escape its limit by rotating through addresses in
	// its own allocation. 32 and 128 (the defaults) keep the full address.
	IPv4Prefix int
	IPv6Prefix int
	// OnDuplicate says what a header or query part does when the request carries its header
	// or query parameter more than once (see Rule.DuplicatePart).
	OnDuplicate Duplicate
}

// StringMatchKind says how a path or header condition compares.
type StringMatchKind uint8

const (
	MatchExact   StringMatchKind = iota + 1 // equal to Value
	MatchPrefix                             // starts with Value
	MatchRegex                              // Value (RE2) matches the whole string
	MatchPresent                            // header present, any value
	MatchAbsent                             // header absent
)

// Match holds a rule's request conditions. Every non-empty condition must hold; within a
// list, any one entry is enough.
type Match struct {
	Routes       []string      // exact xds.route_name values
	VirtualHosts []string      // exact xds.virtual_host_name values
	Path         *PathMatch    // nil: any path
	Methods      []string      // any of these methods
	Headers      []HeaderMatch // every one of these header conditions

	routes  stringSet
	vhosts  stringSet
	methods stringSet
}

// PathMatch compares the request path without its query string.
type PathMatch struct {
	Kind  StringMatchKind // MatchExact, MatchPrefix or MatchRegex
	Value string          // the exact path, the prefix, or the regular expression
	re    *regexp.Regexp
}

// HeaderMatch is one header condition. Invert negates the result, so an exact match with
// Invert holds when the header is absent or has a different value.
type HeaderMatch struct {
	Name   string          // lower-case
	Kind   StringMatchKind // how the header value is compared
	Value  string          // for MatchExact, MatchPrefix and MatchRegex
	Invert bool            // negate the result
	re     *regexp.Regexp
}

// setEnforcement sets EnforcePPM from EnforcePercent, and a shadow rule's share to 100: it
// enforces no denial whatever the top level says.
func (r *Rule) setEnforcement() {
	if r.Shadow {
		r.EnforcePercent = 100
	}
	r.EnforcePPM = uint32(r.EnforcePercent*1e4 + 0.5)
}
