package filter

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Usage costs: a rule whose cost is known only from the response (config.UsageSpec). The
// request is decided like any other, with its reservation as cost (Rule.Cost). Once every
// rule has admitted it, each usage rule's reservation is kept on the stream (openReservations);
// the response is read as it passes, never held or changed: the usage header, then the body's
// JSON pointers chunk by chunk (usageScanner). When the stream ends, each reservation is
// settled by usage minus reservation (algorithms.Settle) through the rule's key table, like a
// decision's write. A stream whose usage never arrived (cut short, no valid value at the
// pointers) is charged the cost's on_missing, and counted.

// usageRule is a usage rule's (or one of its overrides') settlement machinery.
type usageRule struct {
	spec    *config.UsageSpec
	m       *usageMetrics // the rule's, shared by its overrides
	pending sharedstate.Pending
}

// usageMetrics are a usage rule's metrics (see prepareUsage).
type usageMetrics struct {
	reserved, settled, refunded, debt, missing, failed, retries abi.MetricCounter
	open                                                        abi.MetricGauge

	failures uint64 // this VM's settlements of the rule that could not be written
}

// keepKey copies key, the one a usage rule was decided on, into a's own buffer for the
// rule's settlement.
func (a *applied) keepKey(key []byte) { a.key = append(a.key[:0], key...) }

// newUsageRule returns the usage machinery of rule r, nil for a rule without a usage cost.
// An override's shares the metrics of of, its rule's; a rule's own (of nil) are defined by
// prepareUsage.
func newUsageRule(r *config.Rule, of *usageRule) *usageRule {
	if r.CostSpec.Usage == nil {
		return nil
	}
	m := new(usageMetrics)
	if of != nil {
		m = of.m
	}
	return &usageRule{spec: r.CostSpec.Usage, m: m}
}

// prepareUsage sets up the usage machinery of a rule and defines its metrics.
func (rs *ruleState) prepareUsage(ur *usageRule) error {
	rs.usage = ur
	rule, m := rs.rule.Name, ur.m
	var errs []error
	m.reserved = defineCounter(statName("ratelimit_usage_reserved_total", rule), &errs)
	m.settled = defineCounter(statName("ratelimit_usage_settled_total", rule), &errs)
	m.refunded = defineCounter(statName("ratelimit_usage_refunded_total", rule), &errs)
	m.debt = defineCounter(statName("ratelimit_usage_debt_total", rule), &errs)
	m.missing = defineCounter(statName("ratelimit_usage_missing_total", rule), &errs)
	m.failed = defineCounter(statName("ratelimit_usage_settle_failures_total", rule), &errs)
	m.retries = defineCounter(statName("ratelimit_usage_settle_retries_total", rule), &errs)
	g, err := abi.DefineGaugeMetric(statName("ratelimit_usage_open", rule))
	m.open = g
	return joinErrors(append(errs, err))
}

// reservation is one usage rule's open reservation on a stream.
type reservation struct {
	rs      *ruleState // the state decided on: the rule's, or its override's
	key     []byte
	reserve int64
	at      int64 // when it was admitted (for a global rule, on Redis' clock)
	src     int   // its usage source in usageStream.srcs
	// global is set for a reservation Redis admitted: it settles with a script call
	// (settleGlobal) on the key's partition part, or on the overflow key Redis decided it on.
	global, overflow bool
	part             int
}

// usageSource is where one usage spec's value comes from on a stream, and what was found.
type usageSource struct {
	spec     *config.UsageSpec
	scan     usageScanner // for a spec that reads the body
	value    int64        // the header's value
	reported bool         // the header held a valid value
}

// usageStream is a stream's open reservations and what its response has reported so far.
type usageStream struct {
	open []reservation
	srcs []usageSource
	// body is set when a source reads the response body; ended once its last byte has passed.
	body, ended bool
}

// openReservations keeps the reservations of the request's admitted usage rules, once every
// rule has admitted it.
func (h *httpContext) openReservations() {
	var u *usageStream
	for i := range h.d.applied {
		a := &h.d.applied[i]
		ur := a.rs.usage
		// A global rule Redis decided is not local; one decided on shared data under
		// failure_mode "local" is, and settles there.
		global := !a.local && a.rs.redisRule != nil && h.plugin.redis != nil
		if ur == nil || !a.decided || (!a.local && !global) || !a.decision.Allowed {
			continue
		}
		if u == nil {
			u = h.plugin.takeUsageStream()
		}
		src := u.source(ur.spec)
		res := reservation{rs: a.rs, key: append([]byte(nil), a.key...), reserve: a.cost, at: h.startedAt, src: src}
		if global {
			res.global, res.overflow, res.part, res.at = true, a.overflow, h.plugin.redis.partition(a.key), a.redisAt
		}
		u.open = append(u.open, res)
		ur.m.reserved.Increment(uint64(a.cost))
		ur.m.open.Add(1)
	}
	h.usage = u
}

// source returns the index of spec's source on the stream, adding it when no source of the
// stream reads the same value.
func (u *usageStream) source(spec *config.UsageSpec) int {
	for i := range u.srcs {
		if s := u.srcs[i].spec; s == spec || (s.Header == spec.Header && slices.Equal(s.Texts, spec.Texts)) {
			return i
		}
	}
	u.srcs = append(u.srcs, usageSource{spec: spec})
	u.body = u.body || spec.Header == ""
	return len(u.srcs) - 1
}

// takeUsageStream returns an empty usage stream, reusing one a finished stream left.
func (p *plugin) takeUsageStream() *usageStream {
	if n := len(p.usageFree); n > 0 {
		u := p.usageFree[n-1]
		p.usageFree = p.usageFree[:n-1]
		return u
	}
	return new(usageStream)
}

// giveUsageStream keeps a finished stream's usage stream for reuse.
func (p *plugin) giveUsageStream(u *usageStream) {
	for i := range u.open {
		u.open[i] = reservation{}
	}
	for i := range u.srcs {
		u.srcs[i] = usageSource{}
	}
	u.open, u.srcs, u.body, u.ended = u.open[:0], u.srcs[:0], false, false
	if len(p.usageFree) < maxFreeContexts {
		p.usageFree = append(p.usageFree, u)
	}
}

// usageHeaders reads each header source's value, and whether the body is an event stream;
// endOfStream: the response has no body.
func (h *httpContext) usageHeaders(endOfStream bool) {
	u := h.usage
	sse := false
	if u.body {
		ct, _ := abi.GetHttpResponseHeader("content-type")
		sse = strings.HasPrefix(strings.TrimSpace(strings.ToLower(ct)), "text/event-stream")
	}
	for i := range u.srcs {
		s := &u.srcs[i]
		if s.spec.Header == "" {
			s.scan.reset(s.spec.Pointers, sse)
			continue
		}
		if v, err := abi.GetHttpResponseHeader(s.spec.Header); err == nil {
			s.value, s.reported = config.ParseDecimal(v)
		}
	}
	if endOfStream {
		h.endUsageBody()
	}
}

// OnHttpResponseBody scans a chunk of the response body for the stream's usage; the chunk
// passes on at once, unchanged.
func (h *httpContext) OnHttpResponseBody(bodySize int, endOfStream bool) types.Action {
	if h.usage != nil {
		h.usageBody(bodySize, endOfStream)
	}
	return types.ActionContinue
}

// usageBody is OnHttpResponseBody for a stream with reservations.
func (h *httpContext) usageBody(bodySize int, endOfStream bool) {
	defer recoverTo("OnHttpResponseBody", nil)
	u := h.usage
	// The chunk is read in pieces that fit the memory the VM reuses for body reads.
	for off := 0; u.body && off < bodySize && !u.ended; off += abi.MaxBodyRead {
		piece, err := abi.GetHttpResponseBody(off, min(bodySize-off, abi.MaxBodyRead))
		if err != nil {
			break
		}
		for i := range u.srcs {
			if u.srcs[i].spec.Header == "" {
				u.srcs[i].scan.write(piece)
			}
		}
	}
	if endOfStream {
		h.endUsageBody()
	}
}

// endUsageBody notes that the response ended normally.
func (h *httpContext) endUsageBody() {
	u := h.usage
	if u.ended {
		return
	}
	u.ended = true
	for i := range u.srcs {
		if u.srcs[i].spec.Header == "" {
			u.srcs[i].scan.end()
		}
	}
}

// settleUsage settles the stream's reservations when it ends (see the top of this file).
func (h *httpContext) settleUsage() {
	p := h.plugin
	u := h.usage
	h.usage = nil
	now := p.now()
	for i := range u.open {
		res := &u.open[i]
		ur := res.rs.usage
		// The usage reported: a header's valid value, or the body's pointers once it ended.
		src := &u.srcs[res.src]
		usage, ok := src.value, src.reported
		if src.spec.Header == "" {
			usage, ok = src.scan.usage()
			ok = ok && u.ended
		}
		charge := ur.spec.MissingCharge(res.reserve)
		if ok {
			charge = ur.spec.Charge(usage)
		} else {
			ur.m.missing.Increment(1)
		}
		ur.m.open.Add(-1)
		ur.m.settled.Increment(uint64(charge))
		delta := charge - res.reserve
		switch {
		case delta < 0:
			ur.m.refunded.Increment(uint64(-delta))
		case delta > 0:
			ur.m.debt.Increment(uint64(delta))
		default:
			continue
		}
		if res.global {
			p.settleGlobal(res, delta)
			continue
		}
		// Settle finds the key's slot, retries lost races, and places a key that lost its slot
		// (a debt places it again).
		if err := res.rs.table.Settle(res.key, now, res.at, delta, &ur.pending); err != nil {
			res.rs.settleFailed(err)
		} else if ur.pending.Claimed || ur.pending.Evicted {
			res.rs.placed(&ur.pending)
		}
	}
	p.giveUsageStream(u)
}

// settleFailed counts a settlement of the rule that could not be written, and logs the first
// and then every power of two of them.
func (rs *ruleState) settleFailed(err error) {
	m := rs.usage.m
	m.failed.Increment(1)
	if m.failures++; m.failures&(m.failures-1) == 0 {
		abi.LogWarn("ratelimit: rule " + strconv.Quote(rs.rule.Name) + ": a usage cost's settlement was not written (" +
			strconv.FormatUint(m.failures, 10) + " so far): " + err.Error())
	}
}

// Why a settlement was not sent.
var (
	errBreakerOpen = errors.New("redis: not sent: the breaker is open")
	errRetryLate   = errors.New("redis: not sent again: past the retry window")
	errNoRedis     = errors.New("redis: not sent again: the configuration has no Redis")
	errRetired     = errors.New("redis: not sent again: the VM was retired")
)

// settlement is a global settlement on its way: sent, or waiting to be sent again.
type settlement struct {
	s     redis.Settlement // with a key of its own
	rs    *ruleState
	tries int   // calls sent, or not sent with the breaker open
	first int64 // when the first was
	due   int64 // when the next may be sent
}

// The retries of a global settlement whose call failed. Its id guards it in Redis for 60 s
// (SETTLE_ID_TTL_MS in sharedstate/redis/lua/main.lua): a call that Redis ran but whose answer
// was lost is not applied again by its retry, as long as the retry is sent within that time.
const (
	maxSettleTries     = 3                       // the first call and two retries
	maxSettleRetries   = 64                      // settlements waiting per VM; more are not retried
	settleRetryDelay   = int64(time.Second)      // after the first failure, doubled after each
	settleRetryWindow  = 30 * int64(time.Second) // no retry later than this after the first call
	settleRetryTickMin = time.Second             // the tick retries need
)

// settleGlobal settles a reservation Redis admitted by delta, with one script call sent when
// the stream ends (the script in full after NOSCRIPT). Nothing waits for it: its answer is
// handled on the root context (abi.DispatchHttpCallAlways). The call names the settlement with
// a random id, so that Redis applies it once however often it is sent. A call that cannot be
// sent, fails or is skipped while the breaker is open is counted by kind in the Redis metrics
// and sent again on a later tick (settlementFailed); the units stay as reserved when every try
// failed. The breaker hears of Redis from requests only.
func (p *plugin) settleGlobal(res *reservation, delta int64) {
	c := p.redis
	rs := res.rs
	c.keys = rs.redisRule.AppendKey(c.keys[:0], res.part, res.key)
	st := &settlement{rs: rs, first: p.now(), s: redis.Settlement{
		Item:  redis.Item{Rule: rs.redisRule, Key: append([]byte(nil), c.keys...), Part: res.part},
		Delta: delta, Overflow: res.overflow, ReservedAt: res.at, ID: rand.Uint64()}}
	p.trySettlement(st)
}

// trySettlement sends st's call, unless the breaker is open.
func (p *plugin) trySettlement(st *settlement) {
	c := p.redis
	st.tries++
	if c.breakerOf(st.s.Item.Part).openUntil > p.now() {
		c.m.skipped.Increment(1)
		p.settlementFailed(st, errBreakerOpen)
		return
	}
	p.sendSettlement(st, false)
}

// sendSettlement sends st's call, the script in full when full is set; see settleGlobal.
func (p *plugin) sendSettlement(st *settlement, full bool) {
	c := p.redis
	if full {
		c.body = redis.AppendSettle(c.body[:0], &st.s)
	} else {
		c.body = redis.AppendSettleSHA(c.body[:0], &st.s)
	}
	sentAt := p.now()
	_, err := abi.DispatchHttpCallAlways(c.cfg.Cluster, c.headers, c.body, c.timeout, func(numHeaders, bodySize, numTrailers int) {
		defer recoverTo("settleGlobal", nil)
		c.recordLatency(sentAt, p.now())
		err := errCalloutReset
		if !abi.CalloutFailed(numHeaders, bodySize, numTrailers) {
			_, err = redis.ParseSettle(calloutStatus(), calloutBody(bodySize, 0))
		}
		switch {
		case err == nil:
		case errors.Is(err, redis.ErrNoScript) && !full && p.redis != nil:
			c.m.noscript.Increment(1)
			p.sendSettlement(st, true)
		default:
			c.countFailure(err)
			p.settlementFailed(st, err)
		}
	})
	if err != nil {
		err = sendError(err)
		c.countFailure(err)
		p.settlementFailed(st, err)
		return
	}
	c.m.calls.Increment(1)
}

// settlementFailed keeps st to be sent again on a later tick (retrySettlements), with a delay
// that doubles from settleRetryDelay; after its last try, with maxSettleRetries waiting, too
// late for its id to guard it, or without Redis in the VM's configuration any more, it is
// counted in the rule's settle failures.
func (p *plugin) settlementFailed(st *settlement, err error) {
	now := p.now()
	if p.redis != nil && st.tries < maxSettleTries && len(p.retries) < maxSettleRetries && now-st.first < settleRetryWindow {
		st.due = now + settleRetryDelay<<(st.tries-1)
		p.retries = append(p.retries, st)
		p.setRetryTick()
		return
	}
	st.rs.settleFailed(err)
}

// retrySettlements sends again the settlements that are due, on the VM's tick.
func (p *plugin) retrySettlements(now int64) {
	if len(p.retries) == 0 {
		return
	}
	var due []*settlement
	waiting := p.retries[:0]
	for _, st := range p.retries {
		if st.due <= now {
			due = append(due, st)
		} else {
			waiting = append(waiting, st)
		}
	}
	clear(p.retries[len(waiting):])
	p.retries = waiting
	for _, st := range due {
		if now-st.first >= settleRetryWindow { // a tick later than asked for
			st.rs.settleFailed(errRetryLate)
			continue
		}
		st.rs.usage.m.retries.Increment(1)
		p.trySettlement(st)
	}
	p.setRetryTick()
}

// retriesReconfigured fits the settlements waiting for a retry to the VM's new configuration:
// without Redis they are counted as failed, and the tick runs for those left again.
func (p *plugin) retriesReconfigured() {
	if p.redis == nil {
		p.failRetries(errNoRedis)
	}
	if len(p.retries) > 0 || p.retryTick {
		// configure has set the configuration's tick, or left the retries' when the
		// configuration needs none: let setRetryTick ask for the tick either way.
		p.retryTick = len(p.retries) == 0
		p.setRetryTick()
	}
}

// failRetries counts the settlements waiting for a retry as failed, with err.
func (p *plugin) failRetries(err error) {
	for _, st := range p.retries {
		st.rs.settleFailed(err)
	}
	clear(p.retries)
	p.retries = p.retries[:0]
}

// setRetryTick keeps the VM's tick at least every settleRetryTickMin while settlements wait
// for a retry, and at the configuration's otherwise (0: none). It asks the host only when
// that changes the tick.
func (p *plugin) setRetryTick() {
	period := tickPeriod(p.rules, p.redis != nil && len(p.redis.parts) > 0)
	want := len(p.retries) > 0 && (period == 0 || period > settleRetryTickMin)
	if want == p.retryTick {
		return
	}
	p.retryTick = want
	if want {
		period = settleRetryTickMin
	}
	_ = abi.SetTickPeriodMilliSeconds(uint32(period / time.Millisecond))
}
