package redis

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// Script is one Lua script as Redis runs it. Its SHA is computed once, when the package is
// initialised.
type Script struct {
	// Name is the algorithm the script implements: token_bucket, leaky_bucket,
	// sliding_window_counter, sliding_window_log, fixed_window or gcra.
	Name string
	// Source is the Lua source sent by EVAL (and SCRIPT LOAD): lua/lib.lua, any helper file,
	// and lua/<Name>.lua, concatenated, with comment lines, blank lines and indentation
	// removed so the EVAL fallback stays small.
	Source string
	// SHA is the lower-case hex SHA1 of Source, the name EVALSHA uses.
	SHA string

	escapeOnce sync.Once
	escaped    []byte // Source escaped for webdis, made on the first EVAL fallback
}

// The scripts, one per algorithm that has a global (Redis) mode. The adaptive limiter and the
// leaky-bucket shaper have none: the adaptive limit is tuned from each proxy's own signals,
// and a shaper's delays are local by nature.
var (
	scriptTokenBucket   = mustScript("token_bucket", "lib.lua", "bucket.lua", "token_bucket.lua")
	scriptLeakyBucket   = mustScript("leaky_bucket", "lib.lua", "bucket.lua", "leaky_bucket.lua")
	scriptSlidingCount  = mustScript("sliding_window_counter", "lib.lua", "window.lua", "sliding_window_counter.lua")
	scriptSlidingLog    = mustScript("sliding_window_log", "lib.lua", "sliding_window_log.lua")
	scriptFixedWindow   = mustScript("fixed_window", "lib.lua", "window.lua", "fixed_window.lua")
	scriptGCRA          = mustScript("gcra", "lib.lua", "gcra.lua")
	allScripts          = []*Script{scriptTokenBucket, scriptLeakyBucket, scriptSlidingCount, scriptSlidingLog, scriptFixedWindow, scriptGCRA}
	errNoGlobalAdaptive = errors.New("redis: the adaptive algorithm is local only: its limit is tuned from each proxy's own latency and errors")
	errNoGlobalShaper   = errors.New("redis: a leaky_bucket with max_delay (shaping) is local only: delays cannot be applied across proxies; use max_delay 0 (the admission meter) for a global rule")
)

// Scripts returns every script, for tools and tests that load them ahead of time (SCRIPT
// LOAD) or inspect them.
func Scripts() []*Script {
	return append([]*Script(nil), allScripts...)
}

func mustScript(name string, files ...string) *Script {
	var b strings.Builder
	for _, f := range files {
		src, err := luaFiles.ReadFile("lua/" + f)
		if err != nil {
			panic("redis: missing embedded script " + f)
		}
		for _, line := range strings.Split(string(src), "\n") {
			line = strings.TrimSpace(line)
			// The scripts use no long strings or block comments, so a line that starts with
			// "--" is a whole comment line; trailing comments are kept, which is harmless.
			if line == "" || strings.HasPrefix(line, "--") {
				continue
			}
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	src := b.String()
	sum := sha1.Sum([]byte(src))
	return &Script{Name: name, Source: src, SHA: hex.EncodeToString(sum[:])}
}

func (s *Script) escapedSource() []byte {
	s.escapeOnce.Do(func() { s.escaped = escape(nil, s.Source) })
	return s.escaped
}

// The HTTP request that carries one decision to webdis. webdis takes the command from the
// body of a POST to "/", with the arguments separated by '/' and percent-decoded. It ignores
// the Content-Type entirely (measured: none, form, octet-stream all work); the form type is
// what curl -d sends and what webdis' documentation shows, so proxies and logs see the usual
// pairing. The body must not be empty (webdis answers 403).
//
// Envoy also requires an :authority header on a callout; webdis ignores it, so any value (the
// cluster name, say) does.
const (
	// Method is the callout's :method.
	Method = "POST"
	// Path is the callout's :path.
	Path = "/"
	// ContentType is the callout's content-type.
	ContentType = "application/x-www-form-urlencoded"
)

// Rule is one global rate-limit rule prepared for Redis: the script of its algorithm and its
// configuration rendered once as script arguments. Make it when the configuration is loaded;
// it is immutable and safe for concurrent use, and its Append methods do not allocate when
// dst has room.
//
// A decision is one POST whose body is
//
//	EVALSHA/<sha>/1/<escaped key>/<n>/<config args...>
//
// and whose answer ParseReply decodes. When it fails with ErrNoScript (Redis restarted, or
// SCRIPT FLUSH), send the AppendEval body instead: it runs the same script and loads it into
// Redis' script cache in the same round trip, so the next EVALSHA succeeds.
//
// Each script admits or denies and, only when it admits, writes the new state and sets the
// key's TTL; a denial leaves the key untouched (the Go limiters allow skipping the store of a
// denial, and not writing keeps a flood of denied requests from generating writes and
// replication traffic).
type Rule struct {
	script *Script
	args   string // the configuration arguments, each preceded by '/'; digits only
	limit  int64
}

// NewRule validates c with algorithms.New (so the Lua arithmetic stays exact, as the Go one
// does) and prepares its script. It fails for configurations without a global mode: adaptive,
// and the leaky-bucket shaper (MaxDelay > 0).
func NewRule(c algorithms.Config) (*Rule, error) {
	lim, err := algorithms.New(c)
	if err != nil {
		return nil, err
	}
	capacity := c.Burst
	if capacity == 0 {
		capacity = c.Limit
	}
	windowMs := int64(c.Window / time.Millisecond)
	r := &Rule{limit: c.Limit}
	switch l := lim.(type) {
	case *algorithms.TokenBucket:
		r.script = scriptTokenBucket
		r.args = bucketArgs(c.Limit, capacity, c.Window)
	case *algorithms.LeakyBucket:
		if l.Shaping() {
			return nil, errNoGlobalShaper
		}
		r.script = scriptLeakyBucket
		r.args = bucketArgs(c.Limit, capacity, c.Window)
	case *algorithms.SlidingWindowCounter:
		r.script = scriptSlidingCount
		r.args = renderArgs(c.Limit, windowMs)
	case *algorithms.SlidingWindowLog:
		r.script = scriptSlidingLog
		r.args = renderArgs(c.Limit, windowMs)
	case *algorithms.FixedWindow:
		r.script = scriptFixedWindow
		r.args = renderArgs(c.Limit, windowMs)
	case *algorithms.GCRA:
		r.script = scriptGCRA
		r.args = renderArgs(c.Limit, capacity, l.EmissionInterval())
	case *algorithms.Adaptive:
		return nil, errNoGlobalAdaptive
	default:
		return nil, fmt.Errorf("redis: no script for algorithm %q", c.Algorithm)
	}
	return r, nil
}

// Script returns the rule's script.
func (r *Rule) Script() *Script { return r.script }

// Limit returns the configured limit, which every reply for this rule carries; a caller may
// compare the two to detect a reply meant for another rule.
func (r *Rule) Limit() int64 { return r.limit }

// AppendEvalSHA appends the webdis request body for one decision on key for n events:
// EVALSHA/<sha>/1/<escaped key>/<n>/<config args>. key is the raw Redis key (see AppendKey);
// it is escaped here, so any bytes are safe.
func (r *Rule) AppendEvalSHA(dst, key []byte, n int64) []byte {
	dst = append(dst, "EVALSHA/"...)
	dst = append(dst, r.script.SHA...)
	return r.appendTail(dst, key, n)
}

// AppendEval appends the NOSCRIPT fallback body: EVAL/<escaped script>/1/<escaped key>/<n>/
// <config args>. It is several KiB; send it only after ErrNoScript.
func (r *Rule) AppendEval(dst, key []byte, n int64) []byte {
	dst = append(dst, "EVAL/"...)
	dst = append(dst, r.script.escapedSource()...)
	return r.appendTail(dst, key, n)
}

func (r *Rule) appendTail(dst, key []byte, n int64) []byte {
	dst = append(dst, "/1/"...)
	dst = Escape(dst, key)
	dst = append(dst, '/')
	// A negative n renders with '-', which is in the safe set; the script answers it as
	// unsatisfiable, like the Go limiters.
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, r.args...)
}

// appendNow appends the test-only clock override (two more arguments: Unix seconds and
// nanoseconds) to a body made by AppendEvalSHA or AppendEval. The filter never sends it: the
// scripts then use Redis' TIME, one clock for all proxies. It is reachable from the tests
// through export_test.go only.
func appendNow(dst []byte, now int64) []byte {
	if now < 0 {
		now = 0
	}
	dst = append(dst, '/')
	dst = strconv.AppendInt(dst, now/1e9, 10)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, now%1e9, 10)
}

// bucketArgs renders the arguments of bucket.lua: limit, capacity, lg and wg, where
// g = gcd(limit, window in ns), lg = limit/g and wg = window/g, so that the script counts in
// units of 1/wg token and one nanosecond refills exactly lg units, as the Go bucket does.
func bucketArgs(limit, capacity int64, window time.Duration) string {
	g := gcd(limit, int64(window))
	return renderArgs(limit, capacity, limit/g, int64(window)/g)
}

func renderArgs(vals ...int64) string {
	var b []byte
	for _, v := range vals {
		b = append(b, '/')
		b = strconv.AppendInt(b, v, 10)
	}
	return string(b)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
