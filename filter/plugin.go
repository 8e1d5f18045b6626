package filter

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// plugin is the root context: one per VM and plugin configuration. Everything per request
// that can be prepared once lives here, including scratch buffers: a VM is single-threaded, so
// one request at a time uses them.
type plugin struct {
	types.DefaultPluginContext
	id    uint32
	now   func() int64
	store sharedstate.Store // where local state lives: the host's shared data

	cfg   *config.Config
	rules []*ruleState // indexed by config.Rule.Index

	// redis and globals serve rules with scope "global"; globals is indexed like rules.
	redis   *redisClient
	globals []*redis.Rule

	// queue holds the requests paused by shaping rules on this VM.
	queue []queued

	// Scratch space reused by every request on this VM (the request view is read only while
	// OnHttpRequestHeaders runs), so the per-request context is smaller.
	req     request
	matched []*config.Rule
	skipped []*config.Rule // the rules Match found without their key (see countSkipped)
	key     []byte
	free    []*decisions
	// contexts are finished stream contexts kept for reuse (see recycleContext).
	contexts []*httpContext

	failures uint64 // store failures seen, to log the first and then rarely
	// unsampled is the sample of the last request without an x-request-id that a rule with
	// an enforce_percent below 100 decided: n × weylStep mod config.EnforceAll for the n-th
	// (see requestSample).
	unsampled uint64

	// shadowHeaders are the rules' shadow_request_header names, each once, which the filter
	// removes from every request: the upstream hears of a would-be denial from it alone.
	shadowHeaders []string

	// usage is set when a rule has a usage cost; usageFree keeps finished streams' usage
	// state for reuse (see usage.go). retries are the global settlements waiting to be sent
	// again, and retryTick is set while the VM's tick runs for them (see retrySettlements).
	usage     bool
	usageFree []*usageStream
	retries   []*settlement
	retryTick bool
}

// ruleState is everything the filter keeps per configured rule.
type ruleState struct {
	rule   *config.Rule
	table  *sharedstate.Table
	policy string // the rule's RateLimit-Policy item for its configured limit, rendered once
	// item is the start of the rule's RateLimit item, its name as a Structured Fields String
	// and `;r=`; draft and legacy say which rate-limit headers the rule adds. They are set once
	// at configure time (setHeaderParts) rather than worked out on every allowed request.
	item          string
	draft, legacy bool
	m             ruleMetrics

	shape    *shapeMetrics  // set for leaky_bucket rules in mode "shape"
	adaptive *adaptiveState // set for adaptive rules
	maxWait  time.Duration  // the longest wait a decision may report (see maxWait)

	// redisRule is the prepared script arguments of a global rule (or of one of its
	// overrides); nil for a local rule.
	redisRule *redis.Rule
	// overrides are the states of rule.Overrides, by index, nil for an unlimited one (see
	// prepareOverrides).
	overrides []*ruleState
	lease     *leaseState     // set for rules with a lease block (see lease.go)
	usage     *usageRule      // set for rules with a usage cost (see usage.go)
	overLimit *overLimitCache // set for global rules with a lease block
	// nearRemaining is the remaining allowance below which an admission is near the limit
	// (see near.go).
	nearRemaining int64
	// unenforced is the rule's state for the requests it does not enforce, set when its
	// enforce_percent is below 100 (see enforce.go).
	unenforced *ruleState
	// general is set for a rule that decideRequest hands to decideFrom: one with overrides, a
	// lease block, global scope, a partial enforcement or a usage cost. One flag to test on
	// the request path instead of five fields and a string.
	general bool
}

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
	// evictionGranted what those keys may spend again because of it, in units of the rule's
	// limit (0 for a key that was idle).
	evictions       abi.MetricCounter
	evictionGranted abi.MetricCounter
	// slotsUsed is the number of the rule's key slots (an override's included) that hold or
	// have held a key, at most max_keys: each worker adds the slots it places a key in first,
	// into Envoy's process-wide gauge (see placed).
	slotsUsed abi.MetricGauge
	// duplicateHeader and keyTooLong count requests refused (a shadow rule's skipped) for a
	// repeated key header (duplicateKeyHeader) or a key over max_key_bytes (keyTooLong).
	duplicateHeader, keyTooLong abi.MetricCounter
	// nearLimit counts admitted requests that left less than nearRemaining (see near.go).
	nearLimit abi.MetricCounter
}

// OnPluginStart parses and validates the configuration and prepares every rule. Any problem
// refuses the configuration: Envoy then keeps the previous one (or refuses to start), which is
// far better than serving traffic with a limit silently missing.
func (p *plugin) OnPluginStart(size int) (status types.OnPluginStartStatus) {
	defer recoverTo("OnPluginStart", func() { status = types.OnPluginStartStatusFailed })
	data, err := abi.GetPluginConfiguration()
	if err != nil && size > 0 {
		logReadFailure(err)
		return types.OnPluginStartStatusFailed
	}
	if err := p.configure(data); err != nil {
		logInvalid(err)
		return types.OnPluginStartStatusFailed
	}
	// strconv.AppendInt, which configure runs anyway, rather than strconv.Itoa, whose code V8
	// in Envoy would compile in every VM's start for this line alone.
	var buf [20]byte
	abi.LogInfo("ratelimit: configured " + string(strconv.AppendInt(buf[:0], int64(len(p.rules)), 10)) + " rules")
	return types.OnPluginStartStatusOK
}

// OnTick releases due shaped requests, updates adaptive limits and, with redis.partitions,
// reads the partition secret again when it is due (refreshSecret).
func (p *plugin) OnTick() {
	defer recoverTo("OnTick", nil)
	now := p.now()
	if p.redis != nil && len(p.redis.parts) > 0 {
		p.refreshSecret(now)
	}
	p.releaseDue(now)
	p.retrySettlements(now)
	for _, rs := range p.rules {
		if rs.adaptive != nil {
			p.updateAdaptive(rs, now)
		}
	}
}

// OnPluginDone takes this VM's share out of the process-wide breaker gauge when Envoy
// retires the VM's plugin (a configuration update or shutdown): the gauge outlives the VM,
// and a VM that went away with its breaker open would otherwise count as open for good. The
// settlements still waiting for a retry are counted as failed.
func (p *plugin) OnPluginDone() bool {
	defer recoverTo("OnPluginDone", nil)
	if p.redis != nil {
		p.redis.gauge.set(false)
	}
	p.failRetries(errRetired)
	return true
}

func (p *plugin) configure(data []byte) error {
	cfg, err := config.Parse(data)
	if err != nil {
		return err
	}
	rules := make([]*ruleState, len(cfg.Rules))
	globals := make([]*redis.Rule, len(cfg.Rules))
	var client *redisClient
	if cfg.Redis != nil {
		if client, err = newRedisClient(cfg.Redis); err != nil {
			return wrapError("redis: defining metrics: ", err)
		}
	}
	store := p.sharedStore()
	// Slot addressing is keyed with a secret shared by every VM of the process (see
	// sharedstate.LoadSecret), so that clients cannot choose keys that collide.
	secret, err := sharedstate.LoadSecret(store)
	if err != nil {
		return wrapError("reading the key-table secret from shared data: ", err)
	}
	// ticks is set when a rule needs the plugin's tick (shaping, adaptive), shadowHeader when
	// a rule names a shadow request header.
	ticks, shadowHeader, usage := false, false, false
	for i, r := range cfg.Rules {
		// The branches for adaptive, global, leased and shaping rules and every error path
		// call functions of their own, so that code a configuration does not use costs it no
		// compile time at start-up (see doc.go).
		lim := tableLimiter(r.Limiter)
		var ad *adaptiveState
		if a, ok := r.Limiter.(*algorithms.Adaptive); ok {
			ad, lim = p.prepareAdaptive(cfg, r, a)
			ticks = true
		}
		ur := newUsageRule(r, nil)
		if r.Scope == config.ScopeGlobal {
			if err := prepareRedisRule(globals, i, cfg, r); err != nil {
				return err
			}
		}
		slots := uint32(r.MaxKeys)
		if len(r.Key) == 0 {
			// A rule without a key has exactly one key; more slots would never be used.
			slots = 1
		}
		table, err := newRuleTable(cfg, r, store, secret, slots, lim, p.now())
		if err != nil {
			return ruleError(i, "", err)
		}
		rs := &ruleState{rule: r, table: table, policy: policyItem(r), maxWait: maxWait(r.Algorithm), adaptive: ad,
			nearRemaining: nearRemaining(r)}
		rs.setHeaderParts()
		if r.Mode == config.ModeShape {
			rs.prepareShape()
			ticks = true
		}
		if r.Lease != nil {
			rs.prepareLease()
		}
		if err := rs.defineMetrics(); err != nil {
			return ruleError(i, ": defining metrics", err)
		}
		rs.redisRule = globals[i]
		if ur != nil {
			if err := rs.prepareUsage(ur); err != nil {
				return ruleError(i, ": defining metrics", err)
			}
			usage = true
		}
		if len(r.Overrides) > 0 {
			if err := rs.setOverrides(i, cfg, store, secret); err != nil {
				return err
			}
		}
		if r.ShadowRequestHeader != "" {
			shadowHeader = true
		}
		if r.EnforcePPM < config.EnforceAll {
			rs.unenforced = rs.unenforcedTwin()
		}
		rs.general = rs.overrides != nil || rs.lease != nil || r.Scope == config.ScopeGlobal || rs.unenforced != nil || rs.usage != nil
		rules[i] = rs
	}
	p.cfg, p.rules, p.globals, p.redis = cfg, rules, globals, client
	p.usage = usage
	p.req.preferMap = readsHeaderMap(cfg)
	p.shadowHeaders = p.shadowHeaders[:0]
	if shadowHeader {
		p.shadowHeaders = shadowHeaderNames(cfg, p.shadowHeaders)
	}
	if partitioned := client != nil && len(client.parts) > 0; ticks || partitioned {
		if err := setTickPeriod(rules, partitioned); err != nil {
			return err
		}
	}
	p.retriesReconfigured()
	p.warm()
	return nil
}

// newRuleTable returns the table of rule r's keys ("<domain>|<rule>|") deciding with lim; now
// is the configuration's instant (0: unknown, see sharedstate.TableConfig).
func newRuleTable(cfg *config.Config, r *config.Rule, store sharedstate.Store, secret [sharedstate.SecretSize]byte,
	slots uint32, lim sharedstate.Limiter, now int64) (*sharedstate.Table, error) {
	return sharedstate.NewTable(sharedstate.TableConfig{Store: store, Prefix: cfg.Domain + "|" + r.Name + "|",
		Slots: slots, Attempts: cfg.CASAttempts, Limiter: lim, Secret: secret, Now: now})
}

// prepareRedisRule prepares the Redis script arguments of rules[i], a global rule, in
// globals[i], out of configure's line like the functions below (see doc.go).
func prepareRedisRule(globals []*redis.Rule, i int, cfg *config.Config, r *config.Rule) error {
	g, err := redisRule(cfg, r, r.Algorithm)
	if err != nil {
		return ruleError(i, "", err)
	}
	globals[i] = g
	return nil
}

// prepareShape gives a shaping rule its metrics' state.
func (rs *ruleState) prepareShape() {
	rs.shape = &shapeMetrics{}
}

// setOverrides prepares the overrides of rules[i].
//
//go:noinline
func (rs *ruleState) setOverrides(i int, cfg *config.Config, store sharedstate.Store, secret [sharedstate.SecretSize]byte) error {
	o, err := prepareOverrides(rs, cfg, store, secret)
	if err != nil {
		return ruleError(i, ".overrides", err)
	}
	rs.overrides = o
	return nil
}

// shadowHeaderNames appends to names each shadow request header the rules name, once.
//
//go:noinline
func shadowHeaderNames(cfg *config.Config, names []string) []string {
	for _, r := range cfg.Rules {
		if h := r.ShadowRequestHeader; h != "" && !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	return names
}

// setTickPeriod asks the host for the tick that the rules' shaping queues and adaptive
// controllers need, and, with partitions (partitioned), the partition secret's refresh.
func setTickPeriod(rules []*ruleState, partitioned bool) error {
	if period := tickOf(rules, partitioned); period > 0 {
		if err := abi.SetTickPeriodMilliSeconds(uint32(period / time.Millisecond)); err != nil {
			return wrapError("setting the tick period: ", err)
		}
	}
	return nil
}

// tickOf is the tick period setTickPeriod asks for.
func tickOf(rules []*ruleState, partitioned bool) time.Duration {
	period := tickPeriod(rules)
	if period == 0 && partitioned {
		// Only the partition secret's refresh needs the timer (see refreshSecret).
		period = time.Duration(secretRefresh)
	}
	return period
}

// warm allocates while the filter configures what a VM's first request would otherwise
// allocate: a stream context and a decision set in their pools, the scratch slices, and the
// slot name caches of the rules' own tables (not their overrides', which may never see a
// request). A first request that allocates nothing new cannot be the one that grows the Go
// heap (the page allocator's slow path, which V8 compiles on first use, and a copy of linear
// memory in hosts that grow it by copying) (TestV8FirstRequestGrowsNoMemory). It is out of
// configure's line: inlined, it makes configure larger than the two are apart (Go's wasm
// backend saves configure's many live values around each call it adds).
func (p *plugin) warm() {
	for _, rs := range p.rules {
		if rs.table != nil {
			rs.table.Warm()
		}
	}
	// The lists of contexts and working sets kept for reuse get their whole room now: a
	// stream gives them back into it without an append's growth path (recycleContext,
	// giveDecisions).
	if len(p.contexts) == 0 {
		p.contexts = append(make([]*httpContext, 0, maxFreeContexts), &httpContext{plugin: p})
	}
	if len(p.free) == 0 {
		p.free = append(make([]*decisions, 0, maxFreeDecisions), &decisions{applied: make([]applied, 0, len(p.rules))})
	}
	if cap(p.matched) < len(p.rules) {
		p.matched = make([]*config.Rule, 0, len(p.rules))
		p.skipped = make([]*config.Rule, 0, len(p.rules))
	}
	// Whether the allocations above grow the heap depends on where the module's data ends;
	// a throwaway block of heapHeadroom bytes grows it now if less than that is free, so the
	// first requests find free pages (TestV8FirstRequestGrowsNoMemory).
	headroom = make([]byte, heapHeadroom)
	headroom = nil
}

// heapHeadroom is the free heap a configured VM leaves its first requests, and headroom the
// block that makes sure of it (a package variable, so that the allocation is not elided).
const heapHeadroom = 24 << 10

var headroom []byte

// logReadFailure logs why the configuration could not be read (out of line, see doc.go).
func logReadFailure(err error) {
	abi.LogCritical("ratelimit: reading the plugin configuration: " + err.Error())
}

// logInvalid logs why a configuration was refused (out of line, see doc.go).
func logInvalid(err error) {
	// One log call per line: Envoy prefixes a message with its level and source once, so the
	// second and later problems of one multi-line message would carry neither.
	for _, line := range strings.Split("invalid configuration: "+err.Error(), "\n") {
		abi.LogCritical("ratelimit: " + line)
	}
}

// ruleError wraps a problem found while preparing rules[i] as "rules[i]<what>: <err>" (out of
// line, see doc.go).
func ruleError(i int, what string, err error) error {
	return &wrappedError{prefix: "rules[" + strconv.Itoa(i) + "]" + what + ": ", err: err}
}

// wrapError wraps err as prefix + err's message, out of configure's line like ruleError.
func wrapError(prefix string, err error) error {
	return &wrappedError{prefix: prefix, err: err}
}

// wrappedError is err's message between prefix and suffix; it wraps err, so errors.Is and
// errors.AsType see through it. The message is put together when it is asked for, so a
// package-level one (errNoHosts) costs no concatenation in the package initialiser, which V8
// compiles and runs in every VM's start.
type wrappedError struct {
	prefix string
	err    error
	suffix string
}

func (e *wrappedError) Error() string { return e.prefix + e.err.Error() + e.suffix }

func (e *wrappedError) Unwrap() error { return e.err }

// prepareAdaptive builds an adaptive rule's controller state and its table's limiter (the
// controller's current limit over the algorithm), and warns about a low min_limit.
func (p *plugin) prepareAdaptive(cfg *config.Config, r *config.Rule, a *algorithms.Adaptive) (*adaptiveState, sharedstate.Limiter) {
	al := &adaptiveLimiter{a: a, limit: a.CurrentLimit(nil)}
	warnAdaptiveFloor(r, p.sharedStore())
	return &adaptiveState{a: a, lim: al, key: cfg.Domain + "|" + r.Name + "|ctrl"}, al
}

// redisRule prepares the Redis script arguments of a global rule, or of one of its
// overrides with the override's algorithm c. max_keys bounds the rule's live keys in Redis
// too, per partition when the keys are spread over several (see redis.Rule.Partitioned).
//
//go:noinline
func redisRule(cfg *config.Config, r *config.Rule, c algorithms.Config) (*redis.Rule, error) {
	g, err := redis.NewRule(c)
	if err != nil {
		return nil, err
	}
	return g.Partitioned(cfg.Redis.Partitions, int64(r.MaxKeys), cfg.Redis.KeyPrefix, cfg.Domain, r.Name), nil
}

func newRedisClient(cfg *config.Redis) (*redisClient, error) {
	c := &redisClient{
		cfg: cfg,
		headers: [][2]string{
			{":method", redis.Method}, {":path", redis.Path}, {":authority", cfg.Authority},
			{"content-type", redis.ContentType},
		},
		timeout: uint32((cfg.Timeout + time.Millisecond - 1) / time.Millisecond),
		breaker: breaker{threshold: cfg.Breaker.Failures, cooldown: int64(cfg.Breaker.Cooldown),
			probeWait: int64(cfg.Timeout)},
	}
	if cfg.Partitions > 1 {
		c.parts = make([]breaker, cfg.Partitions)
		for i := range c.parts {
			c.parts[i] = c.breaker
		}
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
	var err error
	c.gauge, err = defineBreakerGauge()
	errs = append(errs, err)
	c.m.latency, err = abi.DefineHistogramMetric("ratelimit_redis_latency_us")
	errs = append(errs, err)
	return c, errors.Join(errs...)
}

// prepareLease sets up a leased rule's state, and for a global one its over-limit cache.
//
//go:noinline
func (rs *ruleState) prepareLease() {
	if rs.rule.Scope != config.ScopeGlobal {
		rs.lease = newLeaseState(rs.rule, rs.table)
		return
	}
	rs.lease = newLeaseState(rs.rule, nil)
	rs.overLimit = &overLimitCache{denied: map[string]overLimit{}}
}

// tableLimiter returns l as the limiter of a shared-state table. An interface-to-interface
// conversion builds the method table (itab) at run time the first time, about 15 KB of
// runtime code (getitab, itabInit, name resolution) that V8 would compile in configure for
// that alone; a switch on the concrete types converts with the itabs the compiler emitted.
func tableLimiter(l algorithms.Limiter) sharedstate.Limiter {
	if t := staticTableLimiter(l); t != nil {
		return t
	}
	return l
}

// staticTableLimiter converts the algorithms package's limiters (see tableLimiter), and
// returns nil for any other.
func staticTableLimiter(l algorithms.Limiter) sharedstate.Limiter {
	switch l := l.(type) {
	case *algorithms.TokenBucket:
		return l
	case *algorithms.GCRA:
		return l
	case *algorithms.LeakyBucket:
		return l
	case *algorithms.FixedWindow:
		return l
	case *algorithms.SlidingWindowCounter:
		return l
	case *algorithms.SlidingWindowLog:
		return l
	case *algorithms.Adaptive:
		return l
	}
	return nil
}

// prepareOverrides builds the state of each of the rule's overrides. A key's state belongs to
// the rule and the key, whichever limit applies (see config.Override): an override decides
// the rule's keys in the rule's slots with its own limiter (and, for a global rule, its own
// script arguments on the rule's Redis keys), converting a state written under other
// parameters without grant. The metrics are the rule's: an override changes a limit, not what
// the counters mean.
func prepareOverrides(rs *ruleState, cfg *config.Config, store sharedstate.Store,
	secret [sharedstate.SecretSize]byte) ([]*ruleState, error) {
	r := rs.rule
	if len(r.Overrides) == 0 {
		return nil, nil
	}
	// Every limiter that writes the rule's slots: each table keeps searching the slots of
	// earlier max_keys values for as long as any of them keeps a state active.
	writers := []sharedstate.Limiter{tableLimiter(r.Limiter)}
	for j := range r.Overrides {
		if o := &r.Overrides[j]; !o.Unlimited {
			writers = append(writers, tableLimiter(o.Limiter))
		}
	}
	rs.table.AlsoWrittenBy(writers...)
	out := make([]*ruleState, len(r.Overrides))
	for j := range r.Overrides {
		o := &r.Overrides[j]
		if o.Unlimited {
			continue
		}
		or := *r
		or.Algorithm, or.Limiter, or.Overrides = o.Algorithm, o.Limiter, nil
		ur := newUsageRule(&or, rs.usageMetrics())
		// An override needs a key, so the rule has one and max_keys slots.
		table, err := newRuleTable(cfg, r, store, secret, uint32(r.MaxKeys), tableLimiter(o.Limiter), 0)
		if err != nil {
			return nil, wrapError("["+strconv.Itoa(j)+"]: ", err)
		}
		table.AlsoWrittenBy(writers...)
		st := &ruleState{rule: &or, table: table, policy: policyItem(&or), m: rs.m,
			maxWait: maxWait(o.Algorithm), nearRemaining: nearRemaining(&or), usage: ur}
		st.setHeaderParts()
		if r.Scope == config.ScopeGlobal {
			// The override's keys are the rule's keys, bounded by the rule's max_keys in
			// Redis: a key that finds the rule (or its partition) full is decided on the
			// rule's overflow key, under the override's parameters.
			if st.redisRule, err = redisRule(cfg, r, o.Algorithm); err != nil {
				return nil, wrapError("["+strconv.Itoa(j)+"]: ", err)
			}
		}
		out[j] = st
	}
	return out, nil
}

// statName renders the name of one of a rule's stats: the metric, then its labels as
// ";<label>=<value>" ("ratelimit_requests_total;rule=login;decision=denied"). Envoy's tag
// extraction (stats_config.stats_tags, one regex per label) turns each into a label, so
// Prometheus sees ratelimit_requests_total{rule="login",decision="denied"}; without them the
// name stays one flat stat. Rule names are [A-Za-z0-9_.-], so they never contain ';'.
//
// statName and defineCounter are not inlined: the filter defines its metrics from some thirty
// call sites, and inlined copies would be most of defineMetrics' 17 KB in the module.
func statName(metric, rule string, labels ...string) string {
	n := metric + ";rule=" + rule
	for i := 0; i+1 < len(labels); i += 2 {
		n += ";" + labels[i] + "=" + labels[i+1]
	}
	return n
}

// defineCounter defines the counter called name and appends the error, if any, to errs, for
// errors.Join (which drops nil errors anyway).
//
//go:noinline
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

// ruleCounters names the counters every rule has, in ruleMetrics.counters' order: the metric
// and, for ratelimit_requests_total, the decision label's value (see statName).
var ruleCounters = [...]struct{ metric, decision string }{
	{"ratelimit_requests_total", "allowed"},
	{"ratelimit_requests_total", "denied"},
	{"ratelimit_requests_total", "shadow_denied"},
	{"ratelimit_requests_total", "skipped"},
	{"ratelimit_cas_retries_total", ""},
	{"ratelimit_store_errors_total", ""},
	{"ratelimit_key_overflow_total", ""},
	{"ratelimit_cas_exhausted_total", ""},
	{"ratelimit_key_evictions_total", ""},
	{"ratelimit_key_eviction_granted_total", ""},
	{"ratelimit_near_limit_total", ""},
}

// counters returns pointers to the counters named by ruleCounters, in its order.
func (m *ruleMetrics) counters() [len(ruleCounters)]*abi.MetricCounter {
	return [...]*abi.MetricCounter{&m.allowed, &m.denied, &m.shadowDenied, &m.skipped,
		&m.casRetries, &m.storeErrors, &m.overflow, &m.casExhausted, &m.evictions, &m.evictionGranted, &m.nearLimit}
}

// defineRuleCounter defines the rule's counter metric, labelled with the decision when it is
// not empty (see statName), and appends the error to errs like defineCounter.
func defineRuleCounter(metric, rule, decision string, errs *[]error) abi.MetricCounter {
	if decision != "" {
		return defineCounter(statName(metric, rule, "decision", decision), errs)
	}
	return defineCounter(statName(metric, rule), errs)
}

// defineMetrics defines the rule's stats (see statName and the README's metrics section). The
// counters every rule has are defined in a loop over ruleCounters, and those of leased,
// shaping and adaptive rules by functions of their own: unrolled, the definitions would be
// 9 KB of code that every configure compiles (see doc.go).
func (rs *ruleState) defineMetrics() error {
	name := rs.rule.Name
	var errs []error
	for i, m := range rs.m.counters() {
		*m = defineRuleCounter(ruleCounters[i].metric, name, ruleCounters[i].decision, &errs)
	}
	g, err := abi.DefineGaugeMetric(statName("ratelimit_key_slots_used", name))
	rs.m.slotsUsed = g
	if err != nil {
		errs = append(errs, err)
	}
	rs.m.duplicateHeader = defineRuleCounter("ratelimit_requests_total", name, "duplicate_header", &errs)
	rs.m.keyTooLong = defineRuleCounter("ratelimit_requests_total", name, "key_too_long", &errs)
	if rs.lease != nil || rs.shape != nil || rs.adaptive != nil {
		errs = rs.defineOptionMetrics(errs)
	}
	if len(errs) == 0 {
		return nil
	}
	return joinErrors(errs)
}

// defineOptionMetrics defines the metrics of a leased, shaping or adaptive rule, appending
// each error to errs: one call site in defineMetrics instead of three.
func (rs *ruleState) defineOptionMetrics(errs []error) []error {
	if rs.lease != nil {
		errs = rs.defineLeaseCounters(errs)
	}
	if rs.shape != nil {
		errs = rs.defineShapeMetrics(errs)
	}
	if rs.adaptive != nil {
		errs = rs.defineAdaptiveMetrics(errs)
	}
	return errs
}

// defineLeaseCounters defines a leased rule's counters (see defineLeaseMetrics).
func (rs *ruleState) defineLeaseCounters(errs []error) []error {
	name := rs.rule.Name
	rs.defineLeaseMetrics(func(event string) abi.MetricCounter {
		return defineCounter(statName("ratelimit_"+event+"_total", name), &errs)
	})
	return errs
}

// defineShapeMetrics defines a shaping rule's counters and delay histogram.
func (rs *ruleState) defineShapeMetrics(errs []error) []error {
	name := rs.rule.Name
	rs.shape.queued = defineCounter(statName("ratelimit_shape_queued_total", name), &errs)
	rs.shape.released = defineCounter(statName("ratelimit_shape_released_total", name), &errs)
	rs.shape.dropped = defineCounter(statName("ratelimit_shape_dropped_total", name), &errs)
	h, err := abi.DefineHistogramMetric(statName("ratelimit_shape_delay_ms", name))
	rs.shape.delay = h
	return append(errs, err)
}

// defineAdaptiveMetrics defines an adaptive rule's limit gauge and records the current limit.
func (rs *ruleState) defineAdaptiveMetrics(errs []error) []error {
	g, err := abi.DefineGaugeMetric(statName("ratelimit_adaptive_limit", rs.rule.Name))
	rs.adaptive.gauge = g
	g.Record(rs.adaptive.lim.limit)
	return append(errs, err)
}

func (p *plugin) NewHttpContext(id uint32) types.HttpContext {
	if p.cfg == nil {
		return nil
	}
	if n := len(p.contexts); n > 0 {
		h := p.contexts[n-1]
		p.contexts[n-1] = nil
		p.contexts = p.contexts[:n-1]
		// Every field starts as a new context's would; only the buffers are kept. Field by
		// field, not *h = httpContext{...}: that builds the whole context aside and copies it
		// back with a typed memmove and write barriers, where most fields are already zero
		// (TestNewHttpContextResetsEveryField fails when a field is added and not reset here).
		h.plugin, h.id, h.d = p, id, nil
		h.headers.values, h.headers.ends, h.headers.set = h.headers.values[:0], [len(rateLimitHeaderNames)]int32{}, 0
		h.finished, h.done, h.queued, h.callouts, h.asked = false, false, false, 0, nil
		h.observed, h.usage = h.observed[:0], nil
		h.startedAt, h.respondedAt, h.status = 0, 0, 0
		return h
	}
	return p.newContext(id)
}

// newContext is NewHttpContext with no context to reuse: more streams at once than the VM
// keeps (a VM's first request reuses the one configure made).
func (p *plugin) newContext(id uint32) *httpContext {
	return &httpContext{plugin: p, id: id}
}

// recycleContext keeps a finished stream's context for a later stream (see
// OnHttpStreamDone for when that is safe): allocating one per request costs about a
// microsecond in a Wasm VM.
// A context that finds no room (warm gives the list maxFreeContexts) is left to the garbage
// collector.
func (p *plugin) recycleContext(h *httpContext) {
	if n := len(p.contexts); n < cap(p.contexts) {
		p.contexts = p.contexts[:n+1]
		p.contexts[n] = h
	}
}

// maxFreeContexts bounds the contexts a VM keeps for reuse: as many as streams usually end
// between two new ones, and little memory when a burst of concurrent streams is over.
const maxFreeContexts = 64

// warnAdaptiveFloor warns when an adaptive rule's min_limit is below what its controller can
// reach: an interval with fewer than MinSamples completed requests counts as healthy, so a
// limit that admits fewer per interval climbs back up by itself.
func warnAdaptiveFloor(r *config.Rule, store sharedstate.Store) {
	c := r.Algorithm
	if c.AdjustInterval <= 0 || c.Window <= 0 {
		return
	}
	samples := c.MinSamples
	if samples == 0 {
		samples = algorithms.DefaultMinSamples
	}
	// Admitted per interval = limit x interval / window; the floor solves that for samples.
	floor := (samples*int64(c.Window) + int64(c.AdjustInterval) - 1) / int64(c.AdjustInterval)
	if c.MinLimit < floor {
		warnOnce(store, "ratelimit: rule "+strconv.Quote(r.Name)+": adaptive min_limit "+strconv.FormatInt(c.MinLimit, 10)+
			" is below "+strconv.FormatInt(floor, 10)+", the lowest limit the controller can hold with window "+c.Window.String()+
			" and interval "+c.AdjustInterval.String()+" (it needs "+strconv.FormatInt(samples, 10)+" requests per interval to judge the upstream)")
	}
}

// warnOnce logs a configure-time warning once per process rather than once per worker VM
// (eight copies read as eight problems): the VM whose compare-and-swap creates the message's
// mark in shared data (sharedstate.Update) logs it; a VM that finds the mark stays silent.
func warnOnce(store sharedstate.Store, msg string) {
	created := false
	_, err := sharedstate.Update(store, "ratelimit|warned|"+msg, 1, func(cur []byte) []byte {
		if cur != nil {
			return nil // another VM logged it already
		}
		created = true
		return []byte{1}
	})
	// A store that fails cannot keep the mark: better a repeated warning than none.
	if (err == nil && created) || (err != nil && !errors.Is(err, sharedstate.ErrAttemptsExhausted)) {
		abi.LogWarn(msg)
	}
}

// sharedStore is the store the plugin's state lives in: the host's shared data unless a test
// gave another.
func (p *plugin) sharedStore() sharedstate.Store {
	if p.store == nil {
		return sharedstate.Host{}
	}
	return p.store
}

// readsHeaderMap reports whether the rules read a request's whole header map whenever they
// apply: a header key part counts its header's lines (config.Rule.DuplicatePart), and a client
// IP from X-Forwarded-For joins that header's lines. The map is then read for the first
// header a request asks for (see request.Header).
func readsHeaderMap(cfg *config.Config) bool {
	for _, r := range cfg.Rules {
		for i := range r.Key {
			switch r.Key[i].Source {
			case config.SourceHeader:
				return true
			case config.SourceClientIP:
				if cfg.TrustedHops > 0 {
					return true
				}
			}
		}
	}
	return false
}

// setHeaderParts sets the rule's fixed parts of its rate-limit headers (see ruleState.item).
func (rs *ruleState) setHeaderParts() {
	mode := rs.rule.RateLimitHeaders
	rs.draft = mode == config.HeadersDraft || mode == config.HeadersBoth
	rs.legacy = mode == config.HeadersLegacy || mode == config.HeadersBoth
	rs.item = `"` + rs.rule.Name + `";r=`
}
