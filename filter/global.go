package filter

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Global rules keep their state in Redis, reached through webdis with one HTTP callout per
// request: one script call decides every global rule of the request together and writes only
// if none of the enforced ones denies (see package redis), so a request denied by one global
// rule is charged nothing on the others. Local rules are decided before the callout, writing
// nothing, and a request a local rule denies sends no callout; the local states are written
// (finish) only after Redis has answered. The request waits (StopIteration) for the answer,
// which arrives at the root context; the ABI layer makes the stream the effective context
// again before the callback below runs.
//
// A global rule with a lease block (lease.go) is in the call only when this VM's lease on the
// key could not admit the request; its item then asks for a batch rather than the request's
// cost, debited all or nothing with the request's other global rules. A batch Redis denies
// committed nothing, and the call is sent again with the request's own cost (retakeGlobal),
// so a lease never denies what the exact call admits. A request whose global rules were all
// admitted from leases sends no callout. A batch the call commits after the client reset the
// stream is held as the VM's lease (lateAnswer), as a partitioned rule's late batch is.
//
// With redis.partitions > 1 one request's rules live on different slots of a sharded store,
// so each global rule is a callout of its own, all sent at once, each committing on its own
// (sharedstate/redis's doc.go), each partition with its own breaker. A lease batch one rule's
// call commits after another rule denied the request is held as the VM's lease
// (lateShardAnswer). The partition secret (docs/global-limits.md) is asked for before a VM's
// first partitioned requests (askSecret) and read again every secretRefresh (refreshSecret).

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

// secretRefresh is how often a VM reads the partition secret again (refreshSecret): the time
// within which proxies agree again after Redis lost the secret and one of them stored
// another.
const secretRefresh = 60 * int64(time.Second)

// partition returns the partition of descriptor key: 0 without partitions.
func (c *redisClient) partition(key []byte) int {
	if c.cfg.Partitions <= 1 {
		return 0
	}
	return redis.Partition(&c.secret, key, c.cfg.Partitions)
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

// prepareGlobal prepares the part a of the matched global rule r in the request. It reports
// denied, with the action, when the rule's over-limit cache denies the request, and callout
// when the rule needs the request's Redis call (not when this VM's lease admitted it).
func (h *httpContext) prepareGlobal(a *applied, r *config.Rule, key []byte, now int64) (action types.Action, denied, callout bool) {
	rs := a.rs
	a.key = append(a.key[:0], key...)
	if rs.overLimit != nil && !r.Shadow {
		if d, hit := rs.overLimit.hit(a.key, now, a.cost); hit {
			rs.lease.m.overLimitHit.Increment(1)
			return h.deny(rs, d), true, false
		}
	}
	// A rule this VM's lease admitted needs no callout.
	return types.ActionContinue, false, rs.lease == nil || !h.leaseGlobal(a, now)
}

// decideGlobal is phase 1b: one callout decides every global rule (with partitions, one per
// rule, or first the secret call), and Redis writes them only if none of the enforced ones
// denies; the request waits for the answer. When the call cannot be made, the failure mode
// applies to the rules.
func (h *httpContext) decideGlobal(now int64) types.Action {
	c := h.plugin.redis
	var stopped bool // the request waits for Redis or was denied
	switch {
	case len(c.parts) > 0 && c.secretKnown:
		stopped = h.askShards(now)
	case !c.breaker.allow(now, h.id):
		c.m.skipped.Increment(1)
		stopped = h.redisFailed(now)
	case len(c.parts) > 0:
		stopped = h.askSecret(now)
	default:
		stopped = h.callRedis(now)
	}
	if stopped || h.d.outstanding > 0 {
		return types.ActionPause
	}
	return h.finish()
}

// callRedis sends the request's call (EVALSHA) or, when it cannot be sent, counts the failure
// (noteFailure also feeds the breaker) and applies the failure mode. It reports whether the
// request waits for the call or was denied.
func (h *httpContext) callRedis(now int64) bool {
	err := h.sendCallout(now, false)
	if err == nil {
		return true
	}
	h.noteFailure(now, sendError(err))
	return h.redisFailed(now)
}

// callItems lists the request's global rules as the items of one script call, in rule order,
// into the working set's own list (decisions.items), which the call's answer is parsed
// against: the answer need not list them again. Their keys are in the client's scratch,
// which the next call overwrites; parsing does not read them.
func (h *httpContext) callItems() []redis.Item {
	p, d := h.plugin, h.d
	c := p.redis
	c.keys, d.items = c.keys[:0], d.items[:0]
	for i := range d.applied {
		a := &d.applied[i]
		if !a.inCall() {
			continue
		}
		var it redis.Item
		c.keys, it = c.appendItem(c.keys, a)
		d.items = append(d.items, it)
	}
	// The keys are sliced again once c.keys has stopped growing (appending may move it).
	end := 0
	for i := range d.items {
		n := len(d.items[i].Key)
		d.items[i].Key = c.keys[end : end+n : end+n]
		end += n
	}
	return d.items
}

// nextCallID returns the id of a new script call, which its answer must carry (docs/global-limits.md).
func (c *redisClient) nextCallID() int64 {
	id := c.callID
	c.callID = (id + 1) & redis.MaxCallID
	return id
}

// appendItem appends a's key, in its partition, to keys and returns them with a's item of a
// script call, whose Key is the bytes appended. The call and the parse of its answer build the
// item here alike: an answer judged against an item other than the one sent can call a
// correct reply malformed (a give-back the item does not carry).
func (c *redisClient) appendItem(keys []byte, a *applied) ([]byte, redis.Item) {
	part := c.partition(a.key)
	start := len(keys)
	keys = a.rs.redisRule.AppendKey(keys, part, a.key)
	return keys, redis.Item{Rule: a.rs.redisRule, Key: keys[start:], N: a.callN(), Cost: a.cost,
		GiveBack: a.give, GivenAt: a.givenAt, Shadow: a.rs.rule.Shadow, Part: part}
}

// sendCallout sends the request's one call for all of its global rules (full: the script
// itself, after NOSCRIPT). A request has one such call in flight, so its working set is kept
// in the context (asked) and its callback is made once per context, not as a closure per call.
func (h *httpContext) sendCallout(now int64, full bool) error {
	if h.redisAnswer == nil {
		h.redisAnswer = h.answerRedis
	}
	h.asked = h.d
	h.d.callID = h.plugin.redis.nextCallID()
	return h.dispatch(now, h.d.callID, h.callItems(), full, h.redisAnswer)
}

// dispatch sends one script call for items, named id, EVALSHA or, when full is set (after
// NOSCRIPT), the script itself. The callback captures the working set itself, since the stream
// may be gone before the answer; the answer is handed over even then (abi.DispatchHttpCallAlways):
// it may commit a lease batch the VM must hold, and the latency histogram and the breaker
// must hear it (lateAnswer, lateShardAnswer).
func (h *httpContext) dispatch(now, id int64, items []redis.Item, full bool, answer func(numHeaders, bodySize, numTrailers int)) error {
	c := h.plugin.redis
	if full {
		c.body = redis.AppendEval(c.body[:0], id, items)
	} else {
		c.body = redis.AppendEvalSHA(c.body[:0], id, items)
	}
	return h.send(now, answer)
}

// send sends the call in the client's body for the request (see dispatch); answer must call
// h.answered with the request's working set first.
func (h *httpContext) send(now int64, answer func(numHeaders, bodySize, numTrailers int)) error {
	c := h.plugin.redis
	if _, err := abi.DispatchHttpCallAlways(c.cfg.Cluster, c.headers, c.body, c.timeout, answer); err != nil {
		return err
	}
	c.m.calls.Increment(1)
	d := h.d
	d.sentAt = now
	d.outstanding++
	// The callback holds h until it has run: the context must outlive the stream until then
	// (see OnHttpStreamDone).
	h.callouts++
	return nil
}

// answered notes that a call the request with working set d sent has answered: d waits for
// one call fewer, and the context is held by one callback fewer.
func (h *httpContext) answered(d *decisions) {
	d.outstanding--
	h.callouts--
}

// answerRedis is the callback of sendCallout's call, from the root context with the stream
// made effective again. The answer of a call whose request still waits decides the request;
// a late one is left to lateAnswer.
func (h *httpContext) answerRedis(numHeaders, bodySize, numTrailers int) {
	d := h.asked
	h.answered(d)
	if h.done || h.finished || h.d != d {
		h.lateAnswer(d, numHeaders, bodySize, numTrailers)
		return
	}
	defer recoverTo("answerRedis", h.failWaiting)
	p := h.plugin
	c := p.redis
	now := p.now()
	c.recordLatency(d.sentAt, now)
	_, err := h.callReplies(d, numHeaders, bodySize, numTrailers)
	if err != nil && h.redisCallFailed(d, now, err) || err == nil && h.applyAnswers(d, now) {
		return
	}
	h.finishWhenAnswered(d)
}

// failWaiting applies the failure mode to a waiting request whose answer could not be
// handled (a recovered panic) and resumes the request if that admits it.
func (h *httpContext) failWaiting() {
	if h.failOpenOrClosed() == types.ActionContinue {
		_ = abi.ResumeHttpRequest()
	}
}

// applyAnswers applies Redis's answers, in rule order, to the request's rules, and reports
// whether the request was denied, or is waiting again (a lease batch Redis denied is decided
// again at the request's own cost). Its loop takes the common answer (allowed, no overflow,
// no lease, no over-limit cache, a breaker without failures) and hands any other, with the
// rest, to applyAnswersFrom, so that the usual answer runs this loop alone.
func (h *httpContext) applyAnswers(d *decisions, now int64) (done bool) {
	c := h.plugin.redis
	if b := &c.breaker; b.failures != 0 || b.openUntil != 0 || b.probing {
		return h.applyAnswersFrom(d, now, 0, 0)
	}
	j := 0
	for i := range d.applied {
		a := &d.applied[i]
		if !a.inCall() {
			continue
		}
		ans := &c.answers[j]
		if !ans.Decision.Allowed || ans.Overflow || ans.GaveBack || a.give > 0 || a.take > 0 || a.rs.overLimit != nil {
			return h.applyAnswersFrom(d, now, i, j)
		}
		j++
		a.decision, a.decided, a.overflow, a.redisAt = ans.Decision, true, false, c.at
	}
	return false
}

// applyAnswersFrom is applyAnswers from rule i and answer j on, for every answer; the rules
// before i were allowed without a lease, so they neither deny nor take a batch.
//
//go:noinline
func (h *httpContext) applyAnswersFrom(d *decisions, now int64, i, j int) (done bool) {
	c := h.plugin.redis
	c.partSuccess(-1)
	var denied *applied
	retake, takes := false, false
	for ; i < len(d.applied); i++ {
		a := &d.applied[i]
		if !a.inCall() {
			continue
		}
		ans := &c.answers[j]
		j++
		a.applyAnswer(ans, c.at)
		if a.batchDenied() {
			// The lease's batch did not fit, and the call committed nothing (the rule is
			// enforced): the request's own cost is decided again below, unless another
			// rule denies the request at its own cost anyway.
			a.rs.lease.saw(a.key, d.sentAt, a.decision)
			retake = true
			continue
		}
		takes = takes || a.take > 0
		if a.rs.overLimit != nil && !a.rs.rule.Shadow && !ans.Overflow {
			a.rs.overLimit.record(a.key, d.sentAt, a.cost, clampWaits(a.decision, a.rs.maxWait))
		}
		if !a.decision.Allowed && !a.rs.rule.Shadow && (denied == nil || longerWait(a, denied)) {
			denied = a // the enforced denial with the longest wait is the request's
		}
	}
	switch {
	case denied != nil:
		h.deny(denied.rs, denied.decision)
		return true
	case retake:
		return h.retakeGlobal(d, now)
	case takes:
		h.recordTakes(d, now)
	}
	return false
}

// redisCallFailed handles a failed call of the request: after NOSCRIPT (Redis restarted or its
// script cache was flushed) it sends the script itself once, which also loads it for every
// later EVALSHA; any other failure is counted and the failure mode applied. It reports whether
// the request is waiting again or was denied.
func (h *httpContext) redisCallFailed(d *decisions, now int64, err error) bool {
	if errors.Is(err, redis.ErrNoScript) && !d.retried {
		h.plugin.redis.m.noscript.Increment(1)
		d.retried = true
		if h.sendCallout(now, true) == nil {
			return true
		}
	}
	h.noteFailure(now, err)
	return h.redisFailed(now)
}

// applyAnswer takes Redis's answer for a's item, decided at at on Redis' clock. On the rule's
// overflow key (its key bound reached, the key new) the script decided the request's own cost,
// never a lease's batch (redis.Item.Cost): the decision is the exact one, not a denied batch
// to send again.
func (a *applied) applyAnswer(ans *redis.Answer, at int64) {
	a.decision, a.decided, a.overflow, a.redisAt = ans.Decision, true, ans.Overflow, at
	a.gaveBack(ans.GaveBack)
	if a.overflow {
		a.rs.m.overflow.Increment(1)
		a.take = min(a.take, a.cost)
	}
}

// finishWhenAnswered decides the request and resumes it once the last of its callouts has
// answered (with partitions each global rule is a callout of its own).
func (h *httpContext) finishWhenAnswered(d *decisions) {
	if d.outstanding > 0 {
		return
	}
	if h.finish() == types.ActionContinue {
		if err := abi.ResumeHttpRequest(); err != nil {
			abi.LogWarn("ratelimit: resuming the request: " + err.Error())
		}
	}
}

// retakeGlobal sends the request's call again after Redis denied a lease's batch, each denied
// batch replaced by the request's cost: the first call committed nothing, so the second
// decides the whole request again, exactly. It reports whether the request waits for the call
// or was denied (callRedis).
func (h *httpContext) retakeGlobal(d *decisions, now int64) bool {
	for i := range d.applied {
		a := &d.applied[i]
		if a.inCall() {
			if a.batchDenied() {
				a.take = a.cost
			}
			a.decided = false
		}
	}
	return h.callRedis(now)
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

// noteFailure counts a failed Redis decision by kind and feeds the breaker.
func (h *httpContext) noteFailure(now int64, err error) { h.noteFailureIn(now, -1, err) }

// noteFailureIn is noteFailure for a call to partition part (-1: the one call of an
// unpartitioned request), which feeds that partition's breaker.
func (h *httpContext) noteFailureIn(now int64, part int, err error) {
	c := h.plugin.redis
	c.countFailure(err)
	b := c.breakerOf(part)
	wasOpen := b.openUntil != 0
	opened := b.failure(now)
	if opened {
		if part >= 0 && !wasOpen {
			c.openParts++
		}
		c.gauge.set(part < 0 || c.openParts > 0)
	}
	// The first failure in a row, then every power of two of them, and the breaker's opening
	// (not its reopening after each failed probe, which would log once per cooldown for as
	// long as Redis is down): an outage is in the log at once, without a line per request.
	switch {
	case opened && !wasOpen:
		abi.LogWarn("ratelimit: redis failed " + strconv.Itoa(b.failures) + " times in a row (last: " + err.Error() + "; partition " +
			strconv.Itoa(part) + ", -1: all); the breaker opens: global rules apply failure_mode " +
			strconv.Quote(string(c.cfg.FailureMode)) + " for " + c.cfg.Breaker.Cooldown.String())
	case b.failures&(b.failures-1) == 0:
		abi.LogWarn("ratelimit: redis failed " + strconv.Itoa(b.failures) + " times in a row (last: " + err.Error() + "; partition " +
			strconv.Itoa(part) + ", -1: all); global rules apply failure_mode " + strconv.Quote(string(c.cfg.FailureMode)))
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

// recordLatency records a callout's round trip, sent at sentAt and answered at now, in
// microseconds; a clock that went backwards records nothing.
func (c *redisClient) recordLatency(sentAt, now int64) {
	if us := (now - sentAt) / 1000; us >= 0 {
		c.m.latency.Record(uint64(us))
	}
}

// breakerOf returns the breaker of partition part, or the one breaker when part < 0 or the
// rules are not partitioned.
func (c *redisClient) breakerOf(part int) *breaker {
	if part < 0 || len(c.parts) == 0 {
		return &c.breaker
	}
	return &c.parts[part%len(c.parts)]
}

// partSuccess records an answered call to partition part (-1: the one call of an
// unpartitioned request).
func (c *redisClient) partSuccess(part int) {
	if !c.breakerOf(part).success() {
		return
	}
	if part < 0 || len(c.parts) == 0 {
		c.gauge.set(false)
		abi.LogInfo("ratelimit: redis answers again; global rules use it")
		return
	}
	c.openParts--
	c.gauge.set(c.openParts > 0)
	abi.LogInfo("ratelimit: redis answers again for partition " + strconv.Itoa(part))
}

// redisFailed applies the Redis failure mode to every global rule of the request, whose
// decisions Redis could not make, and reports whether it denied the request.
func (h *httpContext) redisFailed(now int64) bool {
	for i := range h.d.applied {
		if a := &h.d.applied[i]; a.inCall() {
			a.gaveBack(false) // the rules after a denial are not visited below
		}
	}
	for i := range h.d.applied {
		if a := &h.d.applied[i]; a.inCall() && h.globalFailed(now, a) {
			return true
		}
	}
	return false
}

// globalFailed applies the Redis failure mode to one global rule, sending the denial if it
// denies; it reports whether it did.
func (h *httpContext) globalFailed(now int64, a *applied) bool {
	a.take = 0 // no lease without Redis: a local fallback is an exact local decision
	// Units the item carried back are lost when the call was never sent or failed, and
	// counted lost when its fate is unknown (a timeout, a reset): not counted returned
	// unless Redis said it applied them.
	a.gaveBack(false)
	if a.rs.rule.Shadow {
		// A shadow rule never denies, whatever the failure mode: the failure is counted
		// (noteFailure) and the rule takes no part in the request.
		a.decided = false
		return false
	}
	switch h.plugin.redis.cfg.FailureMode {
	case config.RedisFailDeny:
		a.decision = failureDecision(a.rs)
	case config.RedisFailLocal:
		// The rule's own limit, counted on this proxy only: the fleet as a whole may then
		// admit up to one limit per proxy, which is the best a partitioned proxy can
		// promise. Like every local rule it is decided now and written in finish.
		if !h.decideLocal(a, a.key, now, a.cost) {
			return false
		}
	default:
		a.decided = false
		return false
	}
	h.deny(a.rs, a.decision)
	return true
}

// askShards sends one callout per global rule of the request (redis.partitions > 1), each to
// its key's partition, or applies the failure mode to a rule whose partition's breaker is
// open or whose call cannot be sent. It reports whether the request was denied.
func (h *httpContext) askShards(now int64) bool {
	c := h.plugin.redis
	items := h.callItems()
	j := 0
	for i := range h.d.applied {
		a := &h.d.applied[i]
		if !a.inCall() || j >= len(items) {
			continue
		}
		it := items[j : j+1]
		j++
		if !c.breakerOf(it[0].Part).allow(now, h.id) {
			c.m.skipped.Increment(1)
		} else if err := h.sendShardCallout(now, i, it, false); err != nil {
			h.noteFailureIn(now, it[0].Part, sendError(err))
		} else {
			continue
		}
		if h.globalFailed(now, a) {
			return true
		}
	}
	return false
}

// askSecret sends the call that reads the partition secret (redis.AppendSecretCall), offering
// a fresh random candidate, for a request that cannot address its rules' calls without it;
// the request waits and sends them on the answer (onSecretAnswer). With a failed send, the
// request's global rules apply the failure mode. It reports whether the request waits or was
// denied. The one breaker guards it (decideGlobal).
func (h *httpContext) askSecret(now int64) bool {
	c := h.plugin.redis
	candidate := redis.NewSecret()
	c.keys = redis.AppendSecretKey(c.keys[:0], c.cfg.KeyPrefix, h.plugin.cfg.Domain)
	c.body = redis.AppendSecretCall(c.body[:0], c.keys, &candidate)
	d := h.d
	if err := h.send(now, func(nh, bs, nt int) { h.onSecretAnswer(d, nh, bs, nt) }); err != nil {
		h.noteFailure(now, sendError(err))
		return h.redisFailed(now)
	}
	return true
}

// onSecretAnswer handles the answer to a secret call (askSecret): an answered secret is the
// VM's from then on, whoever asked; a request still waiting then sends its rules' calls
// (askShards), or applies the failure mode when Redis failed.
func (h *httpContext) onSecretAnswer(d *decisions, numHeaders, bodySize, numTrailers int) {
	h.answered(d)
	p := h.plugin
	c := p.redis
	waiting := !h.done && !h.finished && h.d == d
	defer recoverTo("onSecretAnswer", func() {
		if waiting {
			h.failWaiting()
		}
	})
	now := p.now()
	c.recordLatency(d.sentAt, now)
	secret, err := c.secretReply(numHeaders, bodySize, numTrailers)
	if err == nil {
		c.partSuccess(-1)
		c.learnSecret(secret, now)
	} else {
		h.noteFailure(now, err)
	}
	if !waiting {
		return
	}
	if err != nil && h.redisFailed(now) || err == nil && h.askShards(now) {
		return
	}
	h.finishWhenAnswered(d)
}

// secretReply parses the answer to a secret call. A call the host failed (reset, timeout) is
// errCalloutReset.
func (c *redisClient) secretReply(numHeaders, bodySize, numTrailers int) (redis.Secret, error) {
	if abi.CalloutFailed(numHeaders, bodySize, numTrailers) {
		return redis.Secret{}, errCalloutReset
	}
	return redis.ParseSecret(calloutStatus(), calloutBody(bodySize, 0))
}

// learnSecret adopts the partition secret Redis answered with at now. A secret other than the
// VM's means Redis lost it and another proxy stored its own, which every proxy adopts within
// secretRefresh.
func (c *redisClient) learnSecret(s redis.Secret, now int64) {
	if c.secretKnown && s != c.secret {
		abi.LogWarn("ratelimit: the partition secret in Redis is not the one this VM used (Redis lost it, and another proxy stored its own); global keys move to their partitions under the stored one")
	}
	c.secret, c.secretKnown, c.secretDue = s, true, now+secretRefresh
}

// refreshSecret reads the partition secret again from the VM's tick, once secretRefresh has
// passed, offering the VM's own as the candidate, so that a secret Redis lost is stored again
// (or another proxy's is adopted). A failure is counted and changes nothing (the breaker
// hears of Redis from requests); nothing is sent while the breaker is open.
func (p *plugin) refreshSecret(now int64) {
	c := p.redis
	if !c.secretKnown || now < c.secretDue || c.breaker.openUntil != 0 {
		return
	}
	c.secretDue = now + secretRefresh
	c.keys = redis.AppendSecretKey(c.keys[:0], c.cfg.KeyPrefix, p.cfg.Domain)
	c.body = redis.AppendSecretCall(c.body[:0], c.keys, &c.secret)
	_, err := abi.DispatchHttpCall(c.cfg.Cluster, c.headers, c.body, c.timeout, func(numHeaders, bodySize, numTrailers int) {
		defer recoverTo("refreshSecret", nil)
		at := p.now()
		c.recordLatency(now, at)
		secret, err := c.secretReply(numHeaders, bodySize, numTrailers)
		if err != nil {
			c.countFailure(err)
			return
		}
		c.learnSecret(secret, at)
	})
	if err != nil {
		c.countFailure(sendError(err))
		return
	}
	c.m.calls.Increment(1)
}

// sendShardCallout sends the call of one global rule, d.applied[i], whose item is items[0]:
// EVALSHA, or the full script when full is set (after NOSCRIPT).
func (h *httpContext) sendShardCallout(now int64, i int, items []redis.Item, full bool) error {
	d := h.d
	d.applied[i].callID = h.plugin.redis.nextCallID()
	err := h.dispatch(now, d.applied[i].callID, items, full, func(nh, bs, nt int) { h.onShardAnswer(d, i, full, nh, bs, nt) })
	if err == nil {
		// Each rule's call has its own send time: a resend of one rule (a denied batch,
		// NOSCRIPT) must not move the instant another rule's answer is measured from.
		d.applied[i].sentAt = now
	}
	return err
}

// onShardAnswer handles the answer to the callout of one global rule, d.applied[i]. An
// enforced denial denies the request at once; the answers of the other rules, which arrive
// later, decide nothing more (their calls have committed on their own), but a lease batch
// one of them committed is kept (lateShardAnswer).
func (h *httpContext) onShardAnswer(d *decisions, i int, full bool, numHeaders, bodySize, numTrailers int) {
	h.answered(d)
	p := h.plugin
	c := p.redis
	if i >= len(d.applied) {
		return
	}
	if h.done || h.finished || h.d != d {
		h.lateShardAnswer(d, i, numHeaders, bodySize, numTrailers)
		return
	}
	defer recoverTo("onShardAnswer", h.failWaiting)
	now := p.now()
	a := &d.applied[i]
	c.recordLatency(a.sentAt, now)
	item, answer, err := h.shardReply(a, numHeaders, bodySize, numTrailers)
	switch {
	case err == nil:
		c.partSuccess(item[0].Part)
		a.applyAnswer(&answer, c.at)
		if a.batchDenied() {
			// The lease's batch did not fit this partition's key, and the call committed
			// nothing but its give-back (counted by applyAnswer): the request's own cost is
			// decided again, by this rule's call alone, giving nothing back.
			a.rs.lease.saw(a.key, a.sentAt, a.decision)
			a.take, a.decided, item[0].N, item[0].GiveBack = a.cost, false, a.cost, 0
			err := h.sendShardCallout(now, i, item[:], false)
			if err == nil || h.shardFailed(now, a, item[0].Part, sendError(err)) {
				return
			}
		} else {
			if a.rs.overLimit != nil && !a.rs.rule.Shadow && !answer.Overflow {
				// Counted from the request's start, which is no later than this call's send
				// (a resend after a denied batch is sent later), so the cache never outlasts
				// Redis's answer.
				a.rs.overLimit.record(a.key, h.startedAt, a.cost, clampWaits(a.decision, a.rs.maxWait))
			}
			if a.take > 0 && a.decision.Allowed {
				a.decision, a.leased = a.rs.lease.takenGlobal(a, a.sentAt, now, answer)
			}
		}
		if a.decided && !a.decision.Allowed && !a.rs.rule.Shadow {
			h.deny(a.rs, a.decision)
			return
		}
	case errors.Is(err, redis.ErrNoScript) && !full:
		// This shard lost the script: send it in full once, as answerRedis does, with the
		// give-back the EVALSHA did not run; an answer to the full script is never NOSCRIPT
		// again.
		c.m.noscript.Increment(1)
		if h.sendShardCallout(now, i, item[:], true) == nil {
			return
		}
		fallthrough
	default:
		if h.shardFailed(now, a, item[0].Part, err) {
			return
		}
	}
	h.finishWhenAnswered(d)
}

// shardFailed counts a failed call of a's partition part and applies the failure mode to a;
// it reports whether it denied the request.
func (h *httpContext) shardFailed(now int64, a *applied, part int, err error) bool {
	h.noteFailureIn(now, part, err)
	return h.globalFailed(now, a)
}

// lateShardAnswer handles the answer to d.applied[i]'s call that arrives after the request
// stopped waiting (another rule denied it, or the stream is gone): it is recorded
// (lateOutcome), the give-back it carried is counted (gaveBack), and a lease batch Redis
// committed is held (holdLateBatch).
func (h *httpContext) lateShardAnswer(d *decisions, i int, numHeaders, bodySize, numTrailers int) {
	defer recoverTo("lateShardAnswer", nil)
	a := &d.applied[i]
	if a.rs == nil {
		return
	}
	item, answer, err := h.shardReply(a, numHeaders, bodySize, numTrailers)
	now := h.lateOutcome(a.sentAt, item[0].Part, err)
	a.gaveBack(err == nil && answer.GaveBack)
	if err == nil {
		if !a.decided {
			holdLateBatch(a, a.sentAt, now, answer)
		}
	}
}

// lateAnswer handles the answer to the request's one call that arrives after its stream is
// gone: what it says of Redis is recorded (lateOutcome), the give-backs the call carried are
// counted (gaveBack: the script applies them whether or not it commits), and when Redis
// committed the call every lease batch in it is held as this VM's lease (holdLateBatch).
func (h *httpContext) lateAnswer(d *decisions, numHeaders, bodySize, numTrailers int) {
	defer recoverTo("lateAnswer", nil)
	c := h.plugin.redis
	committed, err := h.callReplies(d, numHeaders, bodySize, numTrailers)
	now := h.lateOutcome(d.sentAt, -1, err)
	j := 0
	for i := range d.applied {
		a := &d.applied[i]
		if !a.inCall() {
			continue
		}
		if err != nil || j >= len(c.answers) {
			a.gaveBack(false)
			continue
		}
		a.gaveBack(c.answers[j].GaveBack)
		if committed {
			holdLateBatch(a, d.sentAt, now, c.answers[j])
		}
		j++
	}
}

// lateOutcome records what an answer that arrives after its request stopped waiting says of
// Redis, as an awaited answer's is: its round trip since sentAt, and a success or a failure
// for the breaker of partition part (-1: the one breaker). Late answers are the slow ones (a
// client gives up while Redis stalls): left out, the histogram would show a faster Redis than
// clients see, and the breaker would not hear of the failures they gave up on. NOSCRIPT is
// the answer of a Redis that is up: a success. It returns the answer's arrival.
func (h *httpContext) lateOutcome(sentAt int64, part int, err error) (now int64) {
	c := h.plugin.redis
	now = h.plugin.now()
	c.recordLatency(sentAt, now)
	switch {
	case err == nil, errors.Is(err, redis.ErrNoScript):
		c.partSuccess(part)
	default:
		h.noteFailureIn(now, part, err)
	}
	return now
}

// callReplies parses the answer to the request's one call for d's global rules into the
// client's answers, in rule order, and reports whether Redis committed the call; a call the
// host failed (reset, timeout) is errCalloutReset.
func (h *httpContext) callReplies(d *decisions, numHeaders, bodySize, numTrailers int) (committed bool, err error) {
	if abi.CalloutFailed(numHeaders, bodySize, numTrailers) {
		return false, errCalloutReset
	}
	c := h.plugin.redis
	items := d.items
	c.answers = slices.Grow(c.answers[:0], len(items))[:len(items)]
	c.at, committed, err = redis.ParseReplies(calloutStatus(), calloutBody(bodySize, len(items)), d.callID, items, c.answers)
	return committed, err
}

// shardReply parses the answer to a's own call (redis.partitions > 1): the call's item as sent
// (a's give-back included), to send again, and Redis's answer; a failed call is errCalloutReset.
func (h *httpContext) shardReply(a *applied, numHeaders, bodySize, numTrailers int) (item [1]redis.Item, answer redis.Answer, err error) {
	p := h.plugin
	c := p.redis
	c.keys, item[0] = c.appendItem(c.keys[:0], a)
	if abi.CalloutFailed(numHeaders, bodySize, numTrailers) {
		return item, answer, errCalloutReset
	}
	var answers [1]redis.Answer
	c.at, _, err = redis.ParseReplies(calloutStatus(), calloutBody(bodySize, 1), a.callID, item[:], answers[:])
	return item, answers[0], err
}

// holdLateBatch holds as this VM's lease the batch a's call (sent at sentAt) asked for, if it
// asked for one, when Redis committed it after the request stopped waiting: it
// was debited, so ignoring it would leave it neither spent nor counted. The request's own cost
// is held too (the request spent none of it, as in refundLeases); where takenGlobal holds
// nothing (the overflow key, an answer after the ttl, no room) it is dropped with the rest.
func holdLateBatch(a *applied, sentAt, now int64, answer redis.Answer) {
	if a.rs.lease == nil || a.take <= a.cost || !answer.Decision.Allowed {
		return
	}
	a.decision, a.decided = answer.Decision, true
	l := a.rs.lease
	if _, held := l.takenGlobal(a, sentAt, now, answer); held != nil {
		l.refund(held, a.cost, now)
	} else {
		l.m.dropped.Increment(uint64(a.cost))
	}
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
