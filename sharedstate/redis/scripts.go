package redis

import (
	"errors"
	"strconv"
	"sync"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// The script and its SHA-1 are Go string constants (lua.go, written by gen_lua.go from lua/),
// neither embedded nor hashed here: package embed imports io/fs and time, start-up work in
// every VM on Envoy's V8 (TestModuleLinksNoUnusedStdlib, TestModuleLinksNoHeavyPackages), and
// hashing would link crypto/sha1 for a name known before the module is built.
//
//go:generate go run gen_lua.go

// Script is the Lua script as Redis runs it.
type Script struct {
	// Name is "ratelimit".
	Name string
	// Source is the Lua source sent by EVAL (and SCRIPT LOAD): lua/lib.lua, lua/window.lua,
	// one file per algorithm and lua/main.lua, concatenated, with comment lines, blank lines
	// and indentation removed so the EVAL fallback stays small.
	Source string
	// SHA is the lower-case hex SHA1 of Source, the name EVALSHA uses.
	SHA string

	escapeOnce sync.Once
	escaped    []byte // Source escaped for webdis, made on the first EVAL fallback
}

// The one script: every algorithm with a global mode is a set of functions in it, so that one
// call can decide rules of different algorithms together. The adaptive limit is tuned from
// each proxy's own signals and a shaper's delays are local by nature, so neither has a global
// mode. The variable is initialised statically: no code runs for it in a VM's _initialize.
var (
	ratelimitScript     = Script{Name: "ratelimit", Source: luaScript, SHA: luaScriptSHA1}
	errNoGlobalAdaptive = errors.New("redis: the adaptive algorithm is local only: its limit is tuned from each proxy's own latency and errors")
	errNoGlobalShaper   = errors.New("redis: a leaky_bucket with max_delay (shaping) is local only: delays cannot be applied across proxies; use max_delay 0 (the admission meter) for a global rule")
)

// Scripts returns the scripts (today exactly one), for tools and tests that load them ahead of
// time (SCRIPT LOAD) or inspect them.
func Scripts() []*Script { return []*Script{&ratelimitScript} }

// The HTTP request that carries one call to webdis: the command in the body of a POST to "/",
// arguments separated by '/' and percent-decoded, a non-empty body (webdis answers 403 to an
// empty one). webdis ignores the Content-Type; the form type is what curl -d sends and its
// documentation shows. Envoy requires an :authority on a callout, which webdis ignores.
const (
	Method      = "POST"                              // the callout's :method
	Path        = "/"                                 // the callout's :path
	ContentType = "application/x-www-form-urlencoded" // the callout's content-type
)

// Algorithm codes, as the script takes them and as a key records them (lua/lib.lua).
const (
	codeTokenBucket = 1 + iota
	codeLeakyBucket
	codeSlidingCounter
	codeSlidingLog
	codeFixedWindow
	codeGCRA
)

// Rule is one global rate-limit rule prepared for Redis: its algorithm and parameters rendered
// once as script arguments. Make it when the configuration is loaded; it is immutable and safe
// for concurrent use.
type Rule struct {
	args  string // "/<code>/<limit>/<window ns>/<capacity>/<max keys>"; digits only
	limit int64
	// capacity is the most a reply's remaining may be (the burst, or the limit): a larger
	// one is malformed (see answer).
	capacity int64
	// bound is the rule's max_keys (0: unbounded); parts is the number of partitions its keys
	// are spread over (1 or more, see Partitioned); boundKeys holds, per partition, the
	// partition's key set and overflow key, escaped, each preceded by '/'.
	bound     int64
	parts     int
	boundKeys []string
	base      string // args without the bound
	// heads holds, per partition, everything of the rule's keys before the descriptor
	// (appendHead), rendered once by Partitioned for AppendKey.
	heads []string
}

// NewRule validates c with algorithms.New (so the Lua arithmetic stays exact, as the Go one
// does) and prepares its arguments. It fails for configurations without a global mode:
// adaptive, and the leaky-bucket shaper (MaxDelay > 0).
func NewRule(c algorithms.Config) (*Rule, error) {
	lim, err := algorithms.New(c)
	if err != nil {
		return nil, err
	}
	if spec, _ := algorithms.SpecOf(c.Algorithm); !spec.Global {
		return nil, errNoGlobalAdaptive // the one algorithm without a global mode today
	}
	capacity := c.Capacity()
	var code int64
	switch l := lim.(type) {
	case *algorithms.TokenBucket:
		code = codeTokenBucket
	case *algorithms.LeakyBucket:
		if l.Shaping() {
			return nil, errNoGlobalShaper
		}
		code = codeLeakyBucket
	case *algorithms.SlidingWindowCounter:
		code = codeSlidingCounter
	case *algorithms.SlidingWindowLog:
		code = codeSlidingLog
	case *algorithms.FixedWindow:
		code = codeFixedWindow
	case *algorithms.GCRA:
		code = codeGCRA
	default:
		return nil, errors.New("redis: no script for algorithm " + strconv.Quote(c.Algorithm))
	}
	base := renderArgs(code, c.Limit, int64(c.Window), capacity)
	return &Rule{limit: c.Limit, capacity: capacity, base: base, args: base + "/0", parts: 1}, nil
}

// Partitioned returns the rule with its keys spread over partitions hash tags (see
// AppendPartKey; 1 or less: the domain's one slot) and, when maxKeys > 0, a key bound kept per
// partition: each partition has its own key set and overflow key in its own slot, and admits
// at most ceil(maxKeys/partitions) live keys; a new key of a full partition is decided on its
// overflow key (lua/main.lua, "Key bound"), so no active client's key is evicted. prefix,
// domain and name are those of the rule's keys (Rule.AppendKey builds them). Items of a
// partitioned rule must carry their partition (Item.Part).
func (r *Rule) Partitioned(partitions int, maxKeys int64, prefix, domain, name string) *Rule {
	partitions = max(1, min(partitions, MaxPartitions))
	b := *r
	b.parts = partitions
	b.heads = make([]string, partitions)
	for p := range b.heads {
		b.heads[p] = string(appendHead(nil, prefix, domain, name, partitions, p))
	}
	if maxKeys <= 0 {
		return &b
	}
	b.bound = maxKeys
	b.args = b.base + renderArgs((maxKeys+int64(partitions)-1)/int64(partitions))
	b.boundKeys = make([]string, partitions)
	for p, head := range b.heads {
		keys := Escape([]byte{'/'}, append([]byte(head), "#keys"...))
		b.boundKeys[p] = string(Escape(append(keys, '/'), append([]byte(head), "#overflow"...)))
	}
	return &b
}

// AppendKey appends to dst the key of descriptor in partition part of a rule from Partitioned:
// AppendPartKey's key under the prefix, domain and name Partitioned was given, whose part
// before the descriptor is not rendered again.
func (r *Rule) AppendKey(dst []byte, part int, descriptor []byte) []byte {
	return appendDescriptor(append(dst, r.heads[uint(part)%uint(len(r.heads))]...), descriptor)
}

// Item is one rule's part in a call: the rule, its raw Redis key (AppendKey), the number of
// events, and whether the rule is a shadow rule, whose denial does not stop the commit.
type Item struct {
	Rule *Rule
	Key  []byte
	N    int64
	// Cost is the request's own cost when N is a lease's batch (more than the cost), 0
	// otherwise. A key the script decides on the rule's overflow key is decided for Cost
	// alone: a lease batch is never taken there (see lua/main.lua).
	Cost int64
	// GiveBack is how many unspent units of a lease on Key the call gives back to the key's
	// state before deciding (0: none), units debited by a take that Redis decided at GivenAt
	// (Unix ns); see lua/main.lua and algorithms.Returner.
	GiveBack, GivenAt int64
	Shadow            bool
	// Part is the key's partition, Partition(secret, descriptor, Rule.Partitions()): which
	// key set and overflow key bound it. It is 0 for a rule of one partition.
	Part int
}

// AppendEvalSHA appends the webdis request body of one call that decides every item together:
//
//	EVALSHA/<sha>/<number of keys>/<keys of item 1>/.../<n 1>/<shadow 1>/<code>/<limit>/<window>/<capacity>/<max keys>/<cost 1>/<give back 1>/<given at 1>/.../<id>
//
// where the keys of an item are its Key, followed, for a rule with a key bound (see
// Rule.Partitioned), by the rule's key set and overflow key. The script commits only if no
// non-shadow item denies (lua/main.lua). Keys are escaped here, so any bytes are safe; they
// must be distinct (the script refuses duplicates). It does not allocate when dst has room.
// id (0 to MaxCallID) names the call: its answer carries it (ParseReplies), so it must differ
// between the calls in flight of all proxies sharing a webdis.
func AppendEvalSHA(dst []byte, id int64, items []Item) []byte {
	return appendTail(appendCommand(dst, false), id, items)
}

// MaxCallID is the largest call id: the script's numbers are doubles, exact up to 2^53.
const MaxCallID = 1<<53 - 1

// AppendEval appends the NOSCRIPT fallback body, EVAL with the escaped script (many KiB): the
// same call, which also loads the script into Redis' cache for the next EVALSHA.
func AppendEval(dst []byte, id int64, items []Item) []byte {
	return appendTail(appendCommand(dst, true), id, items)
}

// appendCommand appends the command and the script's name, or with full the script itself,
// escaped on the first such call.
func appendCommand(dst []byte, full bool) []byte {
	s := &ratelimitScript
	if full {
		s.escapeOnce.Do(func() { s.escaped = escape(nil, s.Source) })
		return append(append(dst, "EVAL/"...), s.escaped...)
	}
	return append(append(dst, "EVALSHA/"...), s.SHA...)
}

// partKeys returns the escaped key set and overflow key of partition part of a rule with a
// key bound. A part out of range (a caller's mistake) is reduced modulo the partitions, as an
// unsigned number, so it can never index past the keys.
func (r *Rule) partKeys(part int) string { return r.boundKeys[uint(part)%uint(len(r.boundKeys))] }

func appendTail(dst []byte, id int64, items []Item) []byte {
	nkeys := int64(len(items))
	for i := range items {
		nkeys += 2 * min(items[i].Rule.bound, 1) // a bound's key set and overflow key
	}
	dst = appendInt(dst, nkeys)
	for i := range items {
		dst = Escape(append(dst, '/'), items[i].Key)
		if r := items[i].Rule; r.bound > 0 {
			dst = append(dst, r.partKeys(items[i].Part)...)
		}
	}
	for i := range items {
		it := &items[i]
		// A negative n renders with '-', which is in the safe set; the script answers it as
		// unsatisfiable, like the Go limiters.
		dst = append(appendBool(appendInt(dst, it.N), it.Shadow), it.Rule.args...)
		cost, giveBack, givenAt := it.N, int64(0), int64(0)
		if it.Cost > 0 && it.Cost < it.N {
			cost = it.Cost
		}
		if it.GiveBack > 0 {
			giveBack, givenAt = it.GiveBack, max(it.GivenAt, 0)
		}
		dst = appendInt(appendInt(appendInt(dst, cost), giveBack), givenAt)
	}
	return appendInt(dst, id)
}

// appendInt appends '/' and v in decimal, a script argument.
func appendInt(dst []byte, v int64) []byte { return strconv.AppendInt(append(dst, '/'), v, 10) }

// appendBool appends the script argument "/1" or "/0".
func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, "/1"...)
	}
	return append(dst, "/0"...)
}

func renderArgs(vals ...int64) string {
	var b []byte
	for _, v := range vals {
		b = appendInt(b, v)
	}
	return string(b)
}

// Settlement is the settlement of one usage cost when its stream ends (algorithms.Settle):
// Item's key (with its rule and partition) settled by Delta = usage - reservation, once. For a
// rule with a key bound, a key that no longer exists (it expired or was evicted since the
// reservation) is a new key, as in a decision: while the rule has max_keys live keys, a debt
// is settled on the overflow key and a refund not at all, so the key set stays bounded.
type Settlement struct {
	Item Item
	// Delta is usage - reservation: a refund below 0, a debt above.
	Delta int64
	// Overflow is set when the reservation was decided on the rule's overflow key (see
	// Answer.Overflow): the settlement goes there too.
	Overflow bool
	// ReservedAt is the instant Redis decided the reservation at (Reply.Now, the call's now):
	// a window refunds only the window the reservation was counted in.
	ReservedAt int64
	// ID names the settlement: the script sets the key <Key>:#settled:<ID> (in the key's
	// slot, with a TTL of 60 s) before writing, and a call that finds it writes nothing, so a
	// settlement sent again is applied once. It must be unique per settlement of a key.
	ID uint64
}

// AppendSettleSHA appends the webdis request body of one settlement call:
//
//	EVALSHA/<sha>/<number of keys>/<key>[/<key set>/<overflow key>]/<id key>/s/<delta>/<overflow>/<reserved s>/<reserved ns>/<code>/<limit>/<window>/<capacity>/<max keys>
//
// The reply is that of a decision without rules, {now_s, now_ns, 1, 0}; ParseSettle reads it.
// Every algorithm with a usage cost settles (not the sliding log, whose call writes
// nothing).
func AppendSettleSHA(dst []byte, s *Settlement) []byte {
	return appendSettleTail(appendCommand(dst, false), s)
}

// AppendSettle is the NOSCRIPT fallback of AppendSettleSHA (EVAL with the script's source).
func AppendSettle(dst []byte, s *Settlement) []byte {
	return appendSettleTail(appendCommand(dst, true), s)
}

func appendSettleTail(dst []byte, s *Settlement) []byte {
	r := s.Item.Rule
	dst = appendInt(dst, 2+2*min(r.bound, 1)) // the key, its id key, a bound's two keys
	dst = Escape(append(dst, '/'), s.Item.Key)
	if r.bound > 0 {
		dst = append(dst, r.partKeys(s.Item.Part)...)
	}
	dst = Escape(append(dst, '/'), s.Item.Key)
	dst = append(dst, "%3A%23settled%3A"...) // ":#settled:", escaped
	dst = strconv.AppendUint(dst, s.ID, 16)
	dst = appendBool(appendInt(append(dst, "/s"...), s.Delta), s.Overflow)
	at := max(s.ReservedAt, 0)
	return append(appendInt(appendInt(dst, at/1e9), at%1e9), r.args...)
}

// ParseSettle decodes webdis' answer to a settlement call (AppendSettleSHA or AppendSettle),
// with the errors of ParseReplies; now is the instant Redis settled at.
func ParseSettle(status int, body []byte) (now int64, err error) {
	now, _, err = ParseReplies(status, body, 0, nil, nil)
	return now, err
}
