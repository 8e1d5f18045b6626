package redis

import (
	"errors"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// Errors of ParseReplies and ParseSettle. Test them with errors.Is: the values returned may
// wrap them with details.
var (
	// ErrNoScript means Redis does not have the script in its cache (it restarted, or the
	// cache was flushed): send the AppendEval body instead.
	ErrNoScript = errors.New("redis: script not in Redis' cache (NOSCRIPT)")
	// ErrRedis means Redis answered an error (wrong key type, out of memory, busy, a script
	// error...); the *Error carries its message.
	ErrRedis = errors.New("redis: error reply")
	// ErrUnavailable means the Redis path is down: webdis cannot reach Redis (503), or the
	// proxy in front of webdis could not get an answer (502, 503, 504).
	ErrUnavailable = errors.New("redis: unavailable")
	// ErrMalformed means the answer is not a reply of the scripts: not JSON, the wrong shape,
	// truncated, values out of range, or an HTTP status webdis does not use for a command
	// that ran (such as 403 when a webdis ACL forbids EVALSHA).
	ErrMalformed = errors.New("redis: malformed reply")
)

// Error is an error reply from Redis. errors.Is(err, ErrRedis) holds for it.
type Error struct {
	// Message is Redis' message, such as "WRONGTYPE Operation against a key holding the wrong
	// kind of value". It is empty when webdis could not pass it on (webdis drops messages
	// that are not valid UTF-8).
	Message string
}

func (e *Error) Error() string { return "redis: " + e.Message }

func (e *Error) Is(target error) bool { return target == ErrRedis }

// StatusError is an HTTP answer other than 200. errors.Is matches it with ErrUnavailable for
// 502, 503 and 504 and with ErrMalformed for every other status.
type StatusError struct {
	Status int // the HTTP status webdis (or a proxy in front of it) answered
}

func (e *StatusError) Error() string {
	return "redis: webdis answered HTTP " + strconv.Itoa(e.Status)
}

func (e *StatusError) Is(target error) bool {
	switch e.Status {
	case 502, 503, 504:
		return target == ErrUnavailable
	}
	return target == ErrMalformed
}

// Shared errors for the statuses an outage produces on every request (502, 503, 504), so an
// outage does not allocate per request.
var outageErrors = [...]StatusError{{502}, {503}, {504}}

// Answer is one rule's part of the answer to a call.
type Answer struct {
	// Decision is the limiter's decision, field for field what the Go limiter of the same
	// configuration decides at the call's instant. Delay is always 0 (there is no global
	// shaper).
	Decision algorithms.Decision
	// Overflow is set when the rule had reached its key bound and the request, whose key was
	// new, was decided on the rule's overflow key (see Rule.Partitioned).
	Overflow bool
	// GaveBack is set when the item's give-back (Item.GiveBack) was applied to the key's
	// state; units the script did not apply (the overflow key, a state under other parameters
	// or in an older encoding, algorithms.Returner's exceptions) are lost.
	GaveBack bool
	// Now is the call's instant on Redis' clock (Unix ns), the one ParseReplies returns: a
	// lease's units given back later name it as the instant of their take (Item.GivenAt).
	Now int64
}

// Lengths of the flat array the script returns:
// {now_s, now_ns, committed, id, then per rule: allowed, limit, remaining, retry_after_ns,
// reset_after_ns, flags (1: overflow, 2: gave back)}.
const (
	replyHead    = 4
	replyPerRule = 6
)

// ParseReplies decodes webdis' answer to an AppendEvalSHA or AppendEval body made from id and
// items: status is the HTTP status, body the response body, and out (len(items) long) receives
// each item's answer. A success is exactly
//
//	{"EVALSHA":[now_s,now_ns,committed,id,allowed,limit,remaining,retry_after_ns,reset_after_ns,flags,...]}
//
// (or "EVAL"), integers only, six per item; an error reply is {"EVALSHA":[false,"<message>"]},
// with status 200. now is the decision's instant on Redis' clock (Unix ns); committed reports
// whether the script wrote the admitting items' states, as it does exactly when no non-shadow
// item was denied. An answer that does not fit items is malformed: another number of rules, a
// limit other than an item's rule's (the answer is not for this request: a misrouted cluster,
// a proxy in between), another id (webdis hands the reply of a call whose client went away
// to the next request it serves), or a committed flag that contradicts the decisions.
//
// ParseReplies never panics, whatever the body, and does not allocate on success.
//
// The answer webdis writes for a script that ran (no whitespace, unsigned values that pass
// every check) is decoded in one loop that calls nothing, so that it touches little code after
// the round trip has pushed it out of the CPU's caches; parseReplies decodes anything else.
func ParseReplies(status int, body []byte, id int64, items []Item, out []Answer) (now int64, committed bool, err error) {
	const sha, eval = `{"EVALSHA":[`, `{"EVAL":[`
	var (
		b      = body
		i      = len(sha)
		want   = replyHead + replyPerRule*len(items)
		v      [replyHead + replyPerRule]int64 // the head, then one item's values
		k      int                             // the item whose values v holds
		denied bool
	)
	if status != 200 || len(out) < len(items) {
		goto general
	}
	if len(b) < i || string(b[:i]) != sha {
		if i = len(eval); len(b) < i || string(b[:i]) != eval {
			goto general
		}
	}
	for n, j := 0, 0; n < want; n++ {
		// At most 18 digits (no overflow): a 19th fails the separator check.
		x, start, sep := int64(0), i, byte(',')
		if n+1 == want {
			sep = ']'
		}
		for i < len(b) && b[i]-'0' <= 9 && i-start < 18 {
			x = x*10 + int64(b[i]-'0')
			i++
		}
		if i == start || i == len(b) || b[i] != sep || b[start] == '0' && i-start > 1 {
			goto general
		}
		i++
		v[j] = x
		if j++; j == replyHead {
			if sec, nsec := v[0], v[1]; sec > maxReplySec || nsec >= 1e9 || v[2] > 1 || v[3] != id {
				goto general
			}
			now = v[0]*1e9 + v[1]
			committed = v[2] == 1
		}
		if j < replyHead+replyPerRule {
			continue
		}
		allowed, lim, remaining, retry, reset, flags := v[4], v[5], v[6], v[7], v[8], v[9]
		it := &items[k]
		if allowed > 1 || flags > flagGaveBack || lim < 1 || allowed == 1 && retry != 0 ||
			it.Rule.limit != 0 && lim != it.Rule.limit || it.Rule.capacity != 0 && remaining > it.Rule.capacity ||
			flags == flagGaveBack && it.GiveBack <= 0 {
			goto general
		}
		// Field by field: a composite literal would be built aside and copied.
		a := &out[k]
		a.Decision.Allowed, a.Decision.Limit, a.Decision.Remaining = allowed == 1, lim, remaining
		a.Decision.RetryAfter = time.Duration(min(retry, algorithms.MaxExact))
		a.Decision.ResetAfter = time.Duration(min(reset, algorithms.MaxExact))
		a.Decision.Delay, a.Overflow, a.GaveBack, a.Now = 0, flags == flagOverflow, flags == flagGaveBack, now
		denied = denied || allowed == 0 && !it.Shadow
		k, j = k+1, replyHead
	}
	if i == len(b)-1 && b[i] == '}' && committed != denied {
		return now, committed, nil
	}
general:
	return parseReplies(status, body, id, items, out)
}

// parseReplies is ParseReplies for every answer, with what is wrong with a malformed one.
func parseReplies(status int, body []byte, id int64, items []Item, out []Answer) (now int64, committed bool, err error) {
	if status != 200 {
		return 0, false, statusError(status)
	}
	var (
		p      = parser{b: body}
		why    string
		head   [replyHead]int64
		rule   [replyPerRule]int64
		denied bool
		want   = replyHead + replyPerRule*len(items)
	)
	if len(out) < len(items) {
		why = "fewer decisions than items"
		goto fail
	}
	if p.next() != '{' {
		why = "want an object"
		goto fail
	}
	p.space()
	if !p.literal(`"EVALSHA"`) && !p.literal(`"EVAL"`) || p.next() != ':' || p.next() != '[' {
		why = `want {"EVALSHA":[ or {"EVAL":[`
		goto fail
	}
	p.space()
	if p.literal("false") {
		return 0, false, p.errorReply()
	}
	// One pass over the integers: the head's four, then each item's six, checked and
	// converted as soon as they are read.
	for n, i, j := 0, 0, 0; ; n++ { // element n, item i's value j
		v, ok := p.integer()
		switch {
		case !ok:
			why = "want an integer"
			goto fail
		case n == want:
			why = "too many elements"
			goto fail
		case n < replyHead:
			head[n] = v
		default:
			rule[j] = v
			if j++; j == replyPerRule {
				if err := answer(&out[i], &rule, &items[i]); err != nil {
					return 0, false, err
				}
				denied = denied || (!out[i].Decision.Allowed && !items[i].Shadow)
				i, j = i+1, 0
			}
		}
		if c := p.next(); c == ']' && n+1 == want {
			break
		} else if c != ',' {
			why = "want ',', or ']' after the last element"
			goto fail
		}
	}
	switch sec, nsec, c := head[0], head[1], head[2]; {
	case p.next() != '}' || !p.end():
		why = "want '}' and nothing after it"
	case sec < 0 || sec > maxReplySec || nsec < 0 || nsec >= 1e9:
		why = "time out of range"
	case c != 0 && c != 1:
		why = "committed is not 0 or 1"
	case head[3] != id:
		why = "the answer carries another call's id"
	case (c == 1) == denied:
		why = "committed contradicts the decisions"
	default:
		now = sec*1e9 + nsec
		for i := range out[:len(items)] {
			out[i].Now = now
		}
		return now, c == 1, nil
	}
fail:
	return 0, false, p.malformed(why)
}

// statusError is the error of an HTTP status other than 200: a shared one for the statuses an
// outage answers every request with.
func statusError(status int) error {
	if status >= 502 && status <= 504 {
		return &outageErrors[status-502]
	}
	return &StatusError{Status: status}
}

// errorReply reads the rest of an error reply after its "false": [false,"message"], or
// [false] when webdis dropped a message that is not valid UTF-8, and the end of the object.
// It returns ErrNoScript, an *Error, or ErrMalformed when the rest is not that.
func (p *parser) errorReply() error {
	msg, ok := "", true
	c := p.next()
	if c == ',' {
		p.space()
		if msg, ok = p.string(); !ok {
			return p.malformed("bad error message")
		}
		c = p.next()
	}
	if c != ']' || p.next() != '}' || !p.end() {
		return p.malformed("want ']}' after the error")
	}
	if len(msg) >= 9 && msg[:9] == "NOSCRIPT " {
		return ErrNoScript
	}
	return &Error{Message: msg}
}

// answer checks one item's six reply values v and converts them into a. A limit other than
// the item's rule's is a foreign reply (a rule of limit 0 accepts any). A remaining
// above capacity (the rule's burst, or its limit) is malformed: no algorithm holds more than
// its capacity, so such a reply did not come from the rule's script, and rendering it would
// promise clients allowance nobody has (a rule of capacity 0 skips the check). So
// is a give-back applied for an item that gives nothing back.
func answer(a *Answer, v *[replyPerRule]int64, it *Item) error {
	allowed, lim, remaining, retry, reset, flags := v[0], v[1], v[2], v[3], v[4], v[5]
	switch {
	case allowed != 0 && allowed != 1:
		return malformed("allowed is not 0 or 1")
	case flags != 0 && flags != flagOverflow && flags != flagGaveBack:
		// The script gives nothing back on the overflow key, so the two never come together.
		return malformed("flags is not 0, 1 or 2")
	case lim < 1 || remaining < 0 || retry < 0 || reset < 0:
		return malformed("negative or zero field")
	case allowed == 1 && retry != 0:
		return malformed("allowed with a retry-after")
	case it.Rule.limit != 0 && lim != it.Rule.limit:
		return errForeignReply
	case it.Rule.capacity != 0 && remaining > it.Rule.capacity:
		return malformed("remaining above the rule's capacity")
	case flags == flagGaveBack && it.GiveBack <= 0:
		return malformed("gave back for an item that gives nothing back")
	}
	// The scripts keep every duration at or below 2^53 ns, as the Go limiters do; a longer
	// one is clamped here, so that no caller meets a wait it could overflow (2^63-1 ns
	// rounded up to seconds once rendered as a negative Retry-After).
	*a = Answer{Decision: algorithms.Decision{
		Allowed:    allowed == 1,
		Limit:      lim,
		Remaining:  remaining,
		RetryAfter: time.Duration(min(retry, algorithms.MaxExact)),
		ResetAfter: time.Duration(min(reset, algorithms.MaxExact)),
	}, Overflow: flags == flagOverflow, GaveBack: flags == flagGaveBack}
	return nil
}

// The bits of a reply's flags.
const (
	flagOverflow = 1 // decided on the rule's overflow key
	flagGaveBack = 2 // the item's give-back was applied to the key's state
)

// errForeignReply is the malformed answer that carries another limit than the rule's.
var errForeignReply = &malformedError{"the answer carries another rule's limit"}

// maxReplySec keeps sec*1e9 + nsec inside int64; the scripts clamp their clock to 2^62 ns.
const maxReplySec = (1<<63 - 1 - 999_999_999) / 1_000_000_000

// malformedError is ErrMalformed with why the answer is malformed; errors.Is(err,
// ErrMalformed) holds for it. Its message is put together when it is asked for, so the
// package-level errForeignReply costs the package initialiser no string concatenation.
type malformedError struct{ why string }

func (e *malformedError) Error() string { return ErrMalformed.Error() + ": " + e.why }
func (e *malformedError) Unwrap() error { return ErrMalformed }

// malformed is the error of a reply that is not what the scripts return.
func malformed(why string) error { return &malformedError{why} }

// parser is a minimal JSON scanner for the one reply shape webdis produces for the scripts.
// It rejects everything else instead of interpreting it.
type parser struct {
	b []byte
	i int
}

func (p *parser) malformed(why string) error {
	return &malformedError{why + " at byte " + strconv.Itoa(p.i)}
}

// space skips whitespace.
func (p *parser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// next skips whitespace and consumes the byte after it, which it returns (0 at the end).
func (p *parser) next() byte {
	p.space()
	if p.i == len(p.b) {
		return 0
	}
	p.i++
	return p.b[p.i-1]
}

// end skips whitespace and reports whether nothing follows.
func (p *parser) end() bool {
	p.space()
	return p.i == len(p.b)
}

func (p *parser) literal(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// integer skips whitespace and reads a JSON integer: optional '-', then 0 or digits without a
// leading zero, fitting an int64. Fractions and exponents are rejected: webdis writes Redis
// integers as plain digits.
func (p *parser) integer() (int64, bool) {
	p.space()
	b, i := p.b, p.i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	digits := i
	var v uint64
	for ; i < len(b) && b[i]-'0' <= 9; i++ {
		d := uint64(b[i] - '0')
		// v*10+d would exceed 2^63 (compared without a division per digit).
		if v > 1<<63/10 || v == 1<<63/10 && d > 1<<63%10 {
			return 0, false
		}
		v = v*10 + d
	}
	if n := i - digits; n == 0 || n > 1 && b[digits] == '0' || !neg && v > 1<<63-1 {
		return 0, false
	}
	p.i = i
	if neg {
		return -int64(v), true // v <= 2^63, so -v fits (and -2^63 wraps to itself)
	}
	return int64(v), true
}

// string reads a JSON string (an error message) and decodes it with jsontext, which rejects
// invalid escapes, raw control characters, invalid UTF-8 and a lone surrogate's escape.
func (p *parser) string() (string, bool) {
	start := p.i
	if !p.literal(`"`) {
		return "", false
	}
	// The string ends at the first quote that no backslash escapes.
	for ; p.i < len(p.b) && p.b[p.i] != '"'; p.i++ {
		if p.b[p.i] == '\\' {
			p.i++
		}
	}
	if p.i >= len(p.b) {
		p.i = len(p.b)
		return "", false
	}
	p.i++
	s, err := jsontext.AppendUnquote(nil, p.b[start:p.i])
	return string(s), err == nil
}
