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
// that can be prepared once lives here, scratch buffers included (a VM is single-threaded).
type plugin struct {
	types.DefaultPluginContext
	now   func() int64
	store sharedstate.Store // where local state lives: the host's shared data unless a test gave another

	cfg   *config.Config
	rules []*ruleState // indexed by config.Rule.Index

	redis *redisClient // serves rules with scope "global"

	// queue holds the requests paused by shaping rules on this VM.
	queue []queued

	// Scratch space reused by every request on this VM, so the per-request context is smaller.
	req     request
	matched []*config.Rule
	skipped []*config.Rule // the rules Match found without their key (see countSkipped)
	key     []byte
	free    []*decisions
	// contexts are finished stream contexts kept for reuse (see recycleContext).
	contexts []*httpContext

	failures uint64 // store failures seen, to log the first and then rarely
	// unsampled is the sample of the last request without an x-request-id (see enforcing).
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
	// and `;r=`; draft and legacy say which rate-limit headers the rule adds (setHeaderParts).
	item          string
	draft, legacy bool
	m             ruleMetrics

	shape    *shapeMetrics  // set for leaky_bucket rules in mode "shape"
	adaptive *adaptiveState // set for adaptive rules
	maxWait  time.Duration  // the longest wait a decision may report (see maxWait)

	redisRule     *redis.Rule     // a global rule's (or override's) script arguments
	overrides     []*ruleState    // the states of rule.Overrides, by index; nil for an unlimited one
	lease         *leaseState     // set for rules with a lease block (see lease.go)
	usage         *usageRule      // set for rules with a usage cost (see usage.go)
	overLimit     *overLimitCache // set for global rules with a lease block
	nearRemaining int64           // the remaining allowance below which an admission is near the limit
	unenforced    *ruleState      // for the requests an enforce_percent below 100 leaves (see enforce.go)
	general       bool            // decideRequest hands the rule to decideFrom (overrides, lease, global, enforce_percent or usage)
}

// OnPluginStart parses and validates the configuration and prepares every rule. Any problem
// refuses the configuration: Envoy then keeps the previous one (or refuses to start), far
// better than serving traffic with a limit silently missing.
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
	// strconv.AppendInt, which configure runs anyway, rather than strconv.Itoa, whose
	// internal/strconv.FormatInt (1 KB) V8 in Envoy would compile in every VM's start for this
	// line alone (TestV8ValidConfigureCompilesNoColdCode).
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

// OnPluginDone, when Envoy retires the plugin, takes this VM's share out of the process-wide
// breaker gauge and counts the settlements still waiting for a retry as failed.
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
	var client *redisClient
	if cfg.Redis != nil {
		if client, err = newRedisClient(cfg.Redis); err != nil {
			return wrapError("redis: defining metrics: ", err)
		}
	}
	store := p.store
	// Slots are addressed with a secret shared by the process's VMs, so that clients cannot
	// choose keys that collide (sharedstate.LoadSecret).
	secret, err := sharedstate.LoadSecret(store)
	if err != nil {
		return wrapError("reading the key-table secret from shared data: ", err)
	}
	// Whether a rule needs the tick (shaping, adaptive), a shadow request header, a usage cost.
	ticks, shadowHeader, usage := false, false, false
	for i, r := range cfg.Rules {
		// The branches for options and errors call functions of their own, so that code a
		// configuration does not use costs it no compile time at start-up (see doc.go).
		lim := tableLimiter(r.Limiter)
		var ad *adaptiveState
		if a, ok := r.Limiter.(*algorithms.Adaptive); ok {
			ad, lim = p.prepareAdaptive(cfg, r, a)
			ticks = true
		}
		ur := newUsageRule(r, nil)
		var global *redis.Rule
		if r.Scope == config.ScopeGlobal {
			if global, err = redisRule(cfg, r, r.Algorithm); err != nil {
				return ruleError(i, "", err)
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
			nearRemaining: nearRemaining(r), redisRule: global}
		rs.setHeaderParts()
		if r.Mode == config.ModeShape {
			rs.shape = &shapeMetrics{}
			ticks = true
		}
		if r.Lease != nil {
			rs.prepareLease()
		}
		if err := rs.defineMetrics(); err != nil {
			return ruleError(i, ": defining metrics", err)
		}
		if ur != nil {
			if err := rs.prepareUsage(ur); err != nil {
				return ruleError(i, ": defining metrics", err)
			}
			usage = true
		}
		if len(r.Overrides) > 0 {
			if err := rs.prepareOverrides(cfg, store, secret); err != nil {
				return ruleError(i, ".overrides", err)
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
	p.cfg, p.rules, p.redis = cfg, rules, client
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
	if period := tickPeriod(rules, partitioned); period > 0 {
		if err := abi.SetTickPeriodMilliSeconds(uint32(period / time.Millisecond)); err != nil {
			return wrapError("setting the tick period: ", err)
		}
	}
	return nil
}

// warm allocates while the filter configures what a VM's first request would otherwise
// allocate (a stream context, a decision set, the scratch slices, the slot name caches of the
// rules' own tables), so that the first request does not grow the Go heap: the page
// allocator's slow path, which V8 compiles on first use (TestV8FirstRequestGrowsNoMemory). Out
// of configure's line: inlined, it makes configure larger than the two are apart.
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
	// A throwaway block of heapHeadroom bytes grows the heap now if less than that is free.
	headroom = make([]byte, heapHeadroom)
	headroom = nil
}

// heapHeadroom is the free heap a configured VM leaves its first requests; headroom is a
// package variable, so that the allocation is not elided.
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

// ruleError wraps a problem found while preparing rules[i] as "rules[i]<what>: <err>".
func ruleError(i int, what string, err error) error {
	return &wrappedError{prefix: "rules[" + strconv.Itoa(i) + "]" + what + ": ", err: err}
}

// wrapError wraps err as prefix + err's message.
func wrapError(prefix string, err error) error {
	return &wrappedError{prefix: prefix, err: err}
}

// wrappedError is err's message between prefix and suffix, wrapping err. The message is put
// together when asked for, so a package-level one (errNoHosts) costs no concatenation in the
// package initialiser, which V8 compiles in every VM's start.
type wrappedError struct {
	prefix string
	err    error
	suffix string
}

func (e *wrappedError) Error() string { return e.prefix + e.err.Error() + e.suffix }

func (e *wrappedError) Unwrap() error { return e.err }

// prepareAdaptive builds an adaptive rule's controller state and its table's limiter, and
// warns about a low min_limit.
func (p *plugin) prepareAdaptive(cfg *config.Config, r *config.Rule, a *algorithms.Adaptive) (*adaptiveState, sharedstate.Limiter) {
	al := &adaptiveLimiter{a: a, limit: a.CurrentLimit(nil)}
	warnAdaptiveFloor(r, p.store)
	return &adaptiveState{a: a, lim: al, key: cfg.Domain + "|" + r.Name + "|ctrl"}, al
}

// redisRule prepares the Redis script arguments of a global rule, or of one of its overrides
// with the override's algorithm c. max_keys bounds the rule's live keys in Redis too, per
// partition (see redis.Rule.Partitioned).
func redisRule(cfg *config.Config, r *config.Rule, c algorithms.Config) (*redis.Rule, error) {
	g, err := redis.NewRule(c)
	if err != nil {
		return nil, err
	}
	return g.Partitioned(cfg.Redis.Partitions, int64(r.MaxKeys), cfg.Redis.KeyPrefix, cfg.Domain, r.Name), nil
}

// prepareLease sets up a leased rule's state, and for a global one its over-limit cache.
func (rs *ruleState) prepareLease() {
	if rs.rule.Scope != config.ScopeGlobal {
		rs.lease = newLeaseState(rs.rule, rs.table)
		return
	}
	rs.lease = newLeaseState(rs.rule, nil)
	rs.overLimit = &overLimitCache{denied: map[string]overLimit{}}
}

// tableLimiter returns l as the limiter of a shared-state table. An interface-to-interface
// conversion builds the itab at run time, about 15 KB of runtime code that V8 would compile
// in configure for it alone; a switch on the concrete types uses the compiler's itabs.
func tableLimiter(l algorithms.Limiter) sharedstate.Limiter {
	if t := staticTableLimiter(l); t != nil {
		return t
	}
	return l
}

// staticTableLimiter converts the algorithms package's limiters (see tableLimiter), nil for others.
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

// prepareOverrides builds the state of each of the rule's overrides in rs.overrides. A key's
// state belongs to the rule and the key, whichever limit applies (see config.Override): an
// override decides the rule's keys in the rule's slots with its own limiter (and, for a global
// rule, its own script arguments on the rule's Redis keys), converting a state written under
// other parameters without grant. The metrics are the rule's: an override changes a limit, not
// what the counters mean.
func (rs *ruleState) prepareOverrides(cfg *config.Config, store sharedstate.Store, secret [sharedstate.SecretSize]byte) error {
	r := rs.rule
	// Every limiter that writes the rule's slots: each table keeps searching the slots of
	// earlier max_keys values for as long as any of them keeps a state active.
	writers := []sharedstate.Limiter{tableLimiter(r.Limiter)}
	for j := range r.Overrides {
		if o := &r.Overrides[j]; !o.Unlimited {
			writers = append(writers, tableLimiter(o.Limiter))
		}
	}
	rs.table.AlsoWrittenBy(writers...)
	rs.overrides = make([]*ruleState, len(r.Overrides))
	for j := range r.Overrides {
		o := &r.Overrides[j]
		if o.Unlimited {
			continue
		}
		or := *r
		or.Algorithm, or.Limiter, or.Overrides = o.Algorithm, o.Limiter, nil
		ur := newUsageRule(&or, rs.usage)
		// An override needs a key, so the rule has one and max_keys slots.
		table, err := newRuleTable(cfg, r, store, secret, uint32(r.MaxKeys), tableLimiter(o.Limiter), 0)
		if err != nil {
			return wrapError("["+strconv.Itoa(j)+"]: ", err)
		}
		table.AlsoWrittenBy(writers...)
		st := &ruleState{rule: &or, table: table, policy: policyItem(&or), m: rs.m,
			maxWait: maxWait(o.Algorithm), nearRemaining: nearRemaining(&or), usage: ur}
		st.setHeaderParts()
		if r.Scope == config.ScopeGlobal {
			// The override's keys are the rule's, bounded by its max_keys in Redis: a key that
			// finds the rule full is decided on its overflow key, under the override's parameters.
			if st.redisRule, err = redisRule(cfg, r, o.Algorithm); err != nil {
				return wrapError("["+strconv.Itoa(j)+"]: ", err)
			}
		}
		rs.overrides[j] = st
	}
	return nil
}

// ruleCounters names the counters every rule has, in ruleMetrics.counters' order, with the
// decision label's value of ratelimit_requests_total (see statName).
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

// defineRuleCounter is defineCounter for the rule's metric, labelled with a non-empty decision.
func defineRuleCounter(metric, rule, decision string, errs *[]error) abi.MetricCounter {
	if decision != "" {
		return defineCounter(statName(metric, rule, "decision", decision), errs)
	}
	return defineCounter(statName(metric, rule), errs)
}

// defineMetrics defines the rule's stats (see statName and the README's metrics section), in
// a loop over ruleCounters and, for options, functions of their own: unrolled, they would be
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

// defineOptionMetrics defines the metrics of a leased, shaping or adaptive rule (an adaptive
// rule's gauge records its current limit), appending each error to errs.
func (rs *ruleState) defineOptionMetrics(errs []error) []error {
	name := rs.rule.Name
	if rs.lease != nil {
		errs = rs.defineLeaseMetrics(errs)
	}
	if rs.shape != nil {
		rs.shape.queued = defineCounter(statName("ratelimit_shape_queued_total", name), &errs)
		rs.shape.released = defineCounter(statName("ratelimit_shape_released_total", name), &errs)
		rs.shape.dropped = defineCounter(statName("ratelimit_shape_dropped_total", name), &errs)
		h, err := abi.DefineHistogramMetric(statName("ratelimit_shape_delay_ms", name))
		rs.shape.delay, errs = h, append(errs, err)
	}
	if rs.adaptive != nil {
		g, err := abi.DefineGaugeMetric(statName("ratelimit_adaptive_limit", name))
		rs.adaptive.gauge, errs = g, append(errs, err)
		g.Record(rs.adaptive.lim.limit)
	}
	return errs
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
		// field: *h = httpContext{...} builds the context aside and copies it back with a typed
		// memmove and write barriers (TestNewHttpContextResetsEveryField checks every field).
		h.plugin, h.id, h.d = p, id, nil
		h.headers.values, h.headers.ends, h.headers.set = h.headers.values[:0], [len(rateLimitHeaderNames)]int32{}, 0
		h.finished, h.done, h.queued, h.callouts, h.asked = false, false, false, 0, nil
		h.observed, h.usage = h.observed[:0], nil
		h.startedAt, h.respondedAt, h.status = 0, 0, 0
		return h
	}
	return &httpContext{plugin: p, id: id}
}

// recycleContext keeps a finished stream's context for a later stream (see OnHttpStreamDone):
// allocating one per request costs about a microsecond in a Wasm VM. One that finds no room
// (warm gives the list maxFreeContexts) is left to the garbage collector.
func (p *plugin) recycleContext(h *httpContext) {
	if n := len(p.contexts); n < cap(p.contexts) {
		p.contexts = p.contexts[:n+1]
		p.contexts[n] = h
	}
}

// maxFreeContexts bounds the contexts a VM keeps for reuse: little memory after a burst.
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

// warnOnce logs a configure-time warning once per process rather than once per worker VM:
// the VM whose compare-and-swap creates the message's mark in shared data logs it.
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

// readsHeaderMap reports whether the rules read a request's whole header map whenever they
// apply: a header key part counts its header's lines, and a client IP from X-Forwarded-For
// joins them (see request.preferMap).
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
