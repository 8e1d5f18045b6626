package algorithms

import (
	"cmp"
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"time"
)

// Adaptive is adaptive: a limit that moves between MinLimit and MaxLimit with the health of
// the upstream, and admission of requests under the limit in force. It has two parts, each
// with its own state, because they change at very different rates.
//
// # Controller (one state per rule)
//
// Update folds the signals observed since the previous call (Signals: requests, errors,
// latency sum) into the controller state, and at most once per AdjustInterval adjusts the
// limit from the accumulated totals with AIMD (additive increase, multiplicative decrease):
//
//	unhealthy = requests >= MinSamples and
//	            (errors/requests > ErrorThreshold      [if ErrorThreshold > 0]
//	             or latencySum/requests > TargetLatency [if TargetLatency > 0])
//	unhealthy: limit = max(MinLimit, floor(limit × DecreaseFactor))
//	healthy:   limit = min(MaxLimit, limit + IncreaseStep)
//
// with the defaults DecreaseFactor = 0.9, IncreaseStep = max(1, MaxLimit/20) and MinSamples
// = 10: a sick upstream loses 10% of its allowance per interval (half in about 7), and a
// recovered one climbs from the floor to the ceiling in about 20. An interval with fewer than
// MinSamples requests is too little evidence and counts as healthy, so a rule whose traffic
// stopped recovers its full limit. AIMD rather than a latency gradient: it needs no latency
// baseline, reacts to errors too, and keeps the limit in [MinLimit, MaxLimit] in bounded steps.
//
// Each worker VM adds its own interval's signals with one CAS on the rule's one key, and only
// the first tick after AdjustInterval adjusts the limit, from the sum of all workers' signals.
// A fresh controller starts at Limit. The arithmetic is integer: errors×10^6 is compared with
// ErrorThresholdPPM×requests in 128 bits, and DecreaseFactor is applied in parts per million.
// The controller is local only (each proxy judges its own upstream), so it has no Lua port.
//
// Controller state layout (41 bytes): [0] 0x72, [1:9] limit, [9:17] last adjustment (Unix
// ns), [17:25] requests, [25:33] errors, [33:41] latency sum (ns); all int64 LE.
//
// # Admission (one state per request key)
//
// AllowNLimit admits requests under a given limit with the sliding window counter (see
// SlidingWindowCounter for the arithmetic, which is the same with L = limit), and records that
// limit in the key's state. AllowN, the Limiter method, uses the limit recorded in the key's
// state, or Limit for a fresh key; a filter should read the rule's current limit with
// CurrentLimit and call AllowNLimit. Counts carry over when the limit changes, so a lowered
// limit takes effect at once. A request with n above the limit in force is unsatisfiable
// under that limit.
//
// Admission state layout (41 bytes): [0] 0x73, [1:25] parameter block (limit and capacity
// both the limit in force when written, window, max_delay 0; see RecordedConfig), [25:33] ws
// int64 LE, [33:37] prev uint32 LE, [37:41] cur uint32 LE; v1: 21 bytes, 0x71, limit uint32,
// ws, prev, cur.
//
// # Configuration changes
//
// Counts carry over a change of the limit in force, so only the window (and the algorithm) is
// compared with the recorded parameters. A state recorded with another window, or by another
// algorithm, is converted with the limit in force as the capacity (see the package
// documentation): the key has counted C = limit - R in the window that contains tc
// (ws = tc - (tc mod W), prev = 0, cur = C). Read as the old configuration, an adaptive state
// reports the sliding window counter's Remaining under its recorded limit and window.
type Adaptive struct {
	cc                  counterCore
	initial, minL, maxL int64
	targetLatency       int64
	errorPPM, interval  int64
	minSamples, step    int64
	decreasePPM         int64
	win                 uint64 // Window, as the parameter block records it
}

// Signals are the health observations of one interval, summed over the requests the rule
// admitted whose responses completed in that interval: how many, how many of them failed (5xx
// responses, resets, timeouts, ...) and the sum of their latencies. Negative fields count as 0.
type Signals struct {
	Requests, Errors int64
	LatencySum       time.Duration
}

// satAdd adds two values clamped to >= 0 and saturates at MaxInt64.
func satAdd(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

const (
	ctrlSize       = 41
	adaptiveSize   = hdrSize + 16
	adaptiveSizeV1 = 21
	ppm            = 1_000_000
)

// NewAdaptive validates c (Algorithm must be "adaptive") and returns the limiter with its
// controller methods. New(c) returns the same value as a Limiter.
func NewAdaptive(c Config) (*Adaptive, error) {
	if c.Algorithm != AlgAdaptive {
		return nil, cfgErr("algorithm", "NewAdaptive needs "+strconv.Quote(AlgAdaptive)+", got "+strconv.Quote(c.Algorithm))
	}
	if err := validateCommon(c, LimitCeiling); err != nil {
		return nil, err
	}
	a := &Adaptive{initial: c.Limit, minL: c.MinLimit, maxL: cmp.Or(c.MaxLimit, c.Limit)}
	switch {
	case c.MinLimit < 1:
		return nil, cfgErr("min_limit", "must be >= 1, got "+strconv.FormatInt(c.MinLimit, 10))
	case a.maxL > LimitCeiling:
		return nil, cfgErr("max_limit", "must be <= "+strconv.Itoa(LimitCeiling)+", got "+strconv.FormatInt(a.maxL, 10))
	case c.MinLimit > c.Limit:
		return nil, cfgErr("min_limit", "must be <= limit ("+strconv.FormatInt(c.Limit, 10)+"), got "+strconv.FormatInt(c.MinLimit, 10))
	case c.MaxLimit != 0 && c.MaxLimit < c.Limit:
		return nil, cfgErr("max_limit", "must be >= limit ("+strconv.FormatInt(c.Limit, 10)+"), got "+strconv.FormatInt(c.MaxLimit, 10))
	case c.TargetLatency < 0:
		return nil, cfgErr("target_latency", "must be >= 0 (0 turns the latency signal off), got "+c.TargetLatency.String())
	case math.IsNaN(c.ErrorThreshold) || c.ErrorThreshold < 0 || c.ErrorThreshold > 1:
		return nil, cfgErr("error_threshold", "must be a fraction in [0, 1] (0 turns the error signal off), got "+
			strconv.FormatFloat(c.ErrorThreshold, 'g', -1, 64))
	case c.TargetLatency == 0 && c.ErrorThreshold == 0:
		return nil, cfgErr("target_latency", "adaptive needs a health signal: set target_latency, error_threshold or both")
	case c.MinSamples < 0:
		return nil, cfgErr("min_samples", "must be >= 0 (0 means "+strconv.Itoa(DefaultMinSamples)+"), got "+strconv.FormatInt(c.MinSamples, 10))
	case c.IncreaseStep < 0 || c.IncreaseStep > LimitCeiling:
		return nil, cfgErr("increase_step", "must be in [0, "+strconv.Itoa(LimitCeiling)+"] (0 means max_limit/20), got "+
			strconv.FormatInt(c.IncreaseStep, 10))
	case math.IsNaN(c.DecreaseFactor) || c.DecreaseFactor < 0 || c.DecreaseFactor >= 1:
		return nil, cfgErr("decrease_factor", "must be in (0, 1) (0 means "+strconv.FormatFloat(DefaultDecreaseFactor, 'g', -1, 64)+
			"), got "+strconv.FormatFloat(c.DecreaseFactor, 'g', -1, 64))
	}
	if c.AdjustInterval != 0 {
		if err := validateWindow("adjust_interval", c.AdjustInterval); err != nil {
			return nil, err
		}
	}
	a.cc = newCounterCore(c)
	a.cc.lim = a.maxL
	a.win = uint64(c.Window)
	a.targetLatency = int64(c.TargetLatency)
	a.errorPPM = int64(math.Round(c.ErrorThreshold * ppm))
	if c.ErrorThreshold > 0 && a.errorPPM == 0 {
		a.errorPPM = 1 // a tiny positive threshold must not turn the signal off
	}
	a.interval = int64(cmp.Or(c.AdjustInterval, c.Window))
	a.minSamples = cmp.Or(c.MinSamples, DefaultMinSamples)
	a.step = cmp.Or(c.IncreaseStep, max(1, a.maxL/20))
	a.decreasePPM = min(ppm-1, max(1, int64(math.Round(cmp.Or(c.DecreaseFactor, DefaultDecreaseFactor)*ppm))))
	return a, nil
}

type ctrlState struct{ limit, last, requests, errors, latency int64 }

func (a *Adaptive) decodeCtrl(state []byte, now int64) ctrlState {
	if len(state) != ctrlSize || state[0] != verAdaptiveCtrl {
		return ctrlState{limit: a.initial, last: now}
	}
	c := ctrlState{
		limit: get64(state[1:]), last: get64(state[9:]),
		requests: get64(state[17:]), errors: get64(state[25:]), latency: get64(state[33:]),
	}
	if c.last < 0 || c.last > MaxTime {
		return ctrlState{limit: a.initial, last: now}
	}
	c.limit = min(max(c.limit, a.minL), a.maxL)
	c.requests, c.errors, c.latency = max(c.requests, 0), max(c.errors, 0), max(c.latency, 0)
	return c
}

// CurrentLimit returns the limit recorded in a controller state (Limit for a fresh or
// undecodable one), always within [MinLimit, MaxLimit].
func (a *Adaptive) CurrentLimit(ctrlState []byte) int64 { return a.decodeCtrl(ctrlState, 0).limit }

// Update adds the signals s observed since the caller's previous Update to the controller
// state and, at least AdjustInterval after the last adjustment (a stale now only accumulates),
// adjusts the limit from the accumulated signals and starts a new interval. It returns the
// limit in force and the state to store, aliasing ctrlState as AllowN's does.
func (a *Adaptive) Update(ctrlState []byte, s Signals, now int64) (limit int64, newState []byte) {
	now = clampNow(now)
	c := a.decodeCtrl(ctrlState, now)
	c.requests = satAdd(c.requests, s.Requests)
	c.errors = satAdd(c.errors, s.Errors)
	c.latency = satAdd(c.latency, int64(s.LatencySum))
	if now-c.last >= a.interval {
		c.limit = a.adjust(c.limit, c.requests, c.errors, c.latency)
		c.last, c.requests, c.errors, c.latency = now, 0, 0, 0
	}
	out := outBuf(ctrlState, ctrlSize, ctrlSize)
	out[0] = verAdaptiveCtrl
	put64(out[1:], c.limit)
	put64(out[9:], c.last)
	put64(out[17:], c.requests)
	put64(out[25:], c.errors)
	put64(out[33:], c.latency)
	return c.limit, out
}

func (a *Adaptive) unhealthy(requests, errors, latency int64) bool {
	if requests < a.minSamples || requests == 0 {
		return false
	}
	if a.errorPPM > 0 {
		// errors/requests > errorPPM/10^6, compared exactly in 128 bits.
		eh, el := bits.Mul64(uint64(errors), ppm)
		rh, rl := bits.Mul64(uint64(requests), uint64(a.errorPPM))
		if eh > rh || (eh == rh && el > rl) {
			return true
		}
	}
	return a.targetLatency > 0 && latency/requests > a.targetLatency
}

func (a *Adaptive) adjust(limit, requests, errors, latency int64) int64 {
	if a.unhealthy(requests, errors, latency) {
		return max(a.minL, limit*a.decreasePPM/ppm)
	}
	return min(a.maxL, limit+a.step)
}

// locate classifies an admission state: off is where its fields (ws, prev, cur) start
// (hdrSize for the current encoding with a's window, adaptiveSizeV1-16 for the v1 one, 0 for a
// fresh key), and convert is true for a current encoding to convert.
func (a *Adaptive) locate(state []byte) (off int, convert bool) {
	switch {
	case len(state) == adaptiveSize && state[0] == verAdaptiveAdmit2 &&
		binary.LittleEndian.Uint64(state[9:]) == a.win && binary.LittleEndian.Uint64(state[17:]) == 0:
		return hdrSize, false
	case len(state) == adaptiveSizeV1 && state[0] == verAdaptiveAdmit:
		return adaptiveSizeV1 - 16, false
	default:
		return 0, isCurrent(state)
	}
}

// decode reads the recorded limit (clamped to [MinLimit, MaxLimit]) and the counters of a
// state in the current encoding with a's window or in the v1 encoding; anything else
// (including a state to convert) is not ok.
func (a *Adaptive) decode(state []byte) (limit, ws, prev, cur int64, ok bool) {
	off, _ := a.locate(state)
	if off == 0 {
		return 0, 0, 0, 0, false
	}
	limit = min(max(get32(state[1:]), a.minL), a.maxL) // both layouts keep it at [1:5]
	ws, prev, cur, ok = a.cc.decode(state[off:], a.maxL)
	return limit, ws, prev, cur, ok
}

// AllowNLimit decides n events at now under limit (clamped to [MinLimit, MaxLimit]), counting
// with the sliding window counter, and records limit in the returned state. Aliasing and
// zero-allocation rules are those of AllowN.
func (a *Adaptive) AllowNLimit(state []byte, now, n, limit int64) (Decision, []byte) {
	now = clampNow(now)
	limit = min(max(limit, a.minL), a.maxL)
	if _, conv := a.locate(state); conv {
		return a.convert(state, now, n, limit)
	}
	_, ws, prev, cur, ok := a.decode(state)
	w, eff, prev, cur := a.cc.roll(ws, prev, cur, ok, now)
	d, cur, store := a.cc.decide(w, eff, prev, cur, now, n, limit)
	if !store {
		return d, state
	}
	return d, a.encode(state, limit, w, prev, cur)
}

func (a *Adaptive) encode(state []byte, limit, w, prev, cur int64) []byte {
	out := outBuf(state, adaptiveSize, adaptiveSize)
	p := makeParams(limit, limit, dur(int64(a.win)), 0)
	p.put(out, verAdaptiveAdmit2)
	put64(out[hdrSize:], w)
	put32(out[hdrSize+8:], prev)
	put32(out[hdrSize+12:], cur)
	return out
}

// convert decides n under limit on a state recorded with another window or by another
// algorithm; see the type documentation.
func (a *Adaptive) convert(state []byte, now, n, limit int64) (Decision, []byte) {
	var conv []byte
	if c, tc, ok := consumption(state, now, limit); ok {
		conv = a.encode(nil, limit, tc-tc%a.cc.w, 0, c)
	}
	d, out := a.AllowNLimit(conv, now, n, limit)
	return finishConverted(state, d, out, adaptiveSize)
}

// peekAdaptive reports the Remaining of an adaptive admission state at now under the limit and
// window recorded in it (c), and the instant the estimate was taken at. Counts are not
// clamped to a MaxLimit, which is not recorded: a count above the recorded limit (a limit
// lowered by the controller) then weighs in full, which only makes R_old smaller.
func peekAdaptive(state []byte, now int64, c Config) (r, at int64, idle, ok bool) {
	if len(state) != adaptiveSize {
		return 0, 0, false, false
	}
	cc := newCounterCore(c)
	ws, prev, cur, ok := cc.decode(state[hdrSize:], LimitCeiling)
	if !ok {
		return 0, 0, false, false
	}
	w, eff, prev, cur := cc.roll(ws, prev, cur, true, now)
	d, _, _ := cc.decide(w, eff, prev, cur, now, 0, c.Limit)
	return d.Remaining, eff, prev == 0 && cur == 0, true
}

// AllowN implements Limiter: AllowNLimit under the limit recorded in state, or Limit for a
// fresh key (or one recorded with another window or by another algorithm).
func (a *Adaptive) AllowN(state []byte, now int64, n int64) (Decision, []byte) {
	limit, _, _, _, ok := a.decode(state)
	if !ok {
		limit = a.initial
	}
	return a.AllowNLimit(state, now, n, limit)
}

// StateSize implements Limiter: an admission state is always 41 bytes.
func (a *Adaptive) StateSize() int { return adaptiveSize }

// Idle implements Limiter: both admission counters are zero at now. The recorded limit is
// then forgotten, which is harmless because callers pass the controller's limit to
// AllowNLimit.
//
// A state recorded with another window or by another algorithm is idle when the old
// configuration reports at least MaxLimit remaining, so that the converted state is at full
// allowance under any limit the controller can set.
func (a *Adaptive) Idle(state []byte, now int64) bool {
	now = clampNow(now)
	if _, conv := a.locate(state); conv {
		return idleConverted(state, now, a.maxL)
	}
	_, ws, prev, cur, ok := a.decode(state)
	return a.cc.idle(ws, prev, cur, ok, now)
}
