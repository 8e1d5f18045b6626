package redis_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// The tests in this file run the scripts in a real redis-server behind a real webdis, posting
// exactly the bodies the filter's callouts carry.

// webdisClient posts bodies to webdis the way an Envoy callout does (redistest.Post).
type webdisClient struct {
	t   testing.TB
	url string
	hc  *http.Client // for requests that are not callouts
}

func newClient(t testing.TB, url string) *webdisClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 2, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &webdisClient{t: t, url: url, hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

func (c *webdisClient) post(body []byte) (int, []byte) {
	c.t.Helper()
	status, answer, err := redistest.Post(c.url, body)
	if err != nil {
		c.t.Fatalf("POST %s: %v", c.url, err)
	}
	return status, answer
}

func (c *webdisClient) call(body []byte) (redis.Reply, error) {
	c.t.Helper()
	status, b := c.post(body)
	r, err := redis.ParseReply(status, b)
	if err != nil {
		return r, fmt.Errorf("%w (status %d, body %.200q)", err, status, b)
	}
	return r, nil
}

func (c *webdisClient) mustCall(body []byte) redis.Reply {
	c.t.Helper()
	r, err := c.call(body)
	if err != nil {
		c.t.Fatalf("%.120q: %v", body, err)
	}
	return r
}

// diffConfigs are the configurations of the differential test: every algorithm with a global
// mode, with burst != limit, windows of 1ms to 31 days including odd ones, and rates that make
// the exact arithmetic use large units.
var diffConfigs = []algorithms.Config{
	{Algorithm: "token_bucket", Limit: 10, Window: time.Second},
	{Algorithm: "token_bucket", Limit: 5, Window: time.Second, Burst: 20},
	{Algorithm: "token_bucket", Limit: 100, Window: time.Minute, Burst: 7},
	{Algorithm: "token_bucket", Limit: 3600, Window: time.Hour, Burst: 100},
	{Algorithm: "token_bucket", Limit: 7, Window: 1300 * time.Millisecond, Burst: 3},
	{Algorithm: "token_bucket", Limit: 2503, Window: time.Hour, Burst: 10},
	{Algorithm: "leaky_bucket", Limit: 10, Window: time.Second},
	{Algorithm: "leaky_bucket", Limit: 5, Window: time.Second, Burst: 20},
	{Algorithm: "leaky_bucket", Limit: 7, Window: 1300 * time.Millisecond, Burst: 3},
	{Algorithm: "leaky_bucket", Limit: 3600, Window: time.Hour, Burst: 50},
	{Algorithm: "sliding_window", Limit: 10, Window: time.Second},
	{Algorithm: "sliding_window", Variant: "counter", Limit: 100, Window: time.Minute},
	{Algorithm: "sliding_window", Limit: 5, Window: 1300 * time.Millisecond},
	{Algorithm: "sliding_window", Limit: 1000, Window: time.Hour},
	{Algorithm: "sliding_window", Limit: 3, Window: time.Millisecond},
	{Algorithm: "sliding_window", Variant: "log", Limit: 10, Window: time.Second},
	{Algorithm: "sliding_window", Variant: "log", Limit: 5, Window: 1300 * time.Millisecond},
	{Algorithm: "sliding_window", Variant: "log", Limit: 50, Window: time.Minute},
	{Algorithm: "sliding_window", Variant: "log", Limit: 20, Window: time.Hour},
	{Algorithm: "fixed_window", Limit: 10, Window: time.Second},
	{Algorithm: "fixed_window", Limit: 3, Window: 1300 * time.Millisecond},
	{Algorithm: "fixed_window", Limit: 100, Window: time.Hour},
	{Algorithm: "fixed_window", Limit: 5, Window: 31 * 24 * time.Hour},
	{Algorithm: "gcra", Limit: 10, Window: time.Second},
	{Algorithm: "gcra", Limit: 10, Window: time.Second, Burst: 3},
	{Algorithm: "gcra", Limit: 7, Window: 1300 * time.Millisecond, Burst: 1},
	{Algorithm: "gcra", Limit: 3600, Window: time.Hour, Burst: 50},
	{Algorithm: "gcra", Limit: 3, Window: time.Second},
}

// loadScripts loads every script with SCRIPT LOAD, as an operator could ahead of time, and
// checks that Redis names each by the SHA the package computed.
func loadScripts(t testing.TB, srv *redistest.Server) {
	t.Helper()
	for _, s := range redis.Scripts() {
		if sha := srv.MustDo("SCRIPT", "LOAD", s.Source); sha != s.SHA {
			t.Fatalf("%s: Redis names the script %v, the package %s", s.Name, sha, s.SHA)
		}
	}
}

// mustDo is srv.Do that fails t, for subtests running in parallel on one server (srv.MustDo
// fails the test that started the server).
func mustDo(t testing.TB, srv *redistest.Server, args ...string) any {
	t.Helper()
	v, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return v
}

func cfgName(c algorithms.Config) string {
	name := c.Algorithm
	if c.Variant != "" {
		name += "_" + c.Variant
	}
	name += fmt.Sprintf("/L%d_W%v", c.Limit, c.Window)
	if c.Burst != 0 {
		name += fmt.Sprintf("_B%d", c.Burst)
	}
	return name
}

func capacity(c algorithms.Config) int64 {
	if c.Burst != 0 {
		return c.Burst
	}
	return c.Limit
}

// step is one request of a differential sequence, kept for failure reports.
type step struct {
	now, n  int64
	goD     algorithms.Decision
	luaD    algorithms.Decision
	allowed bool
}

// differ runs requests against the script and the Go limiter of one configuration and fails
// on the first decision that differs. The Go limiter is fed the instant Redis reports, and its
// state is only replaced when it admits, because the script writes only then (a denial's
// returned state is the same state semantically, see package algorithms).
//
// The instants are the test's own, but Redis expires the key on its real clock, at least
// TTL_MARGIN_MS (1s) after a write: a slow machine would lose the key between two steps that
// are nanoseconds apart for the algorithm. So once persistAfter of real time has passed since
// the last write, the differ removes the key's TTL before the next step; a key found gone
// then did expire on the real clock, and the Go side starts fresh too. A step that itself
// stalls past the shortest TTL may have run on an expired key: its decision must be Go's on
// the state or on a fresh one, and both sides then start fresh. Both are logged.
type differ struct {
	t       *testing.T
	c       *webdisClient
	rule    *redis.Rule
	lim     algorithms.Limiter
	key     []byte
	state   []byte
	buf     []byte
	history []step
	counts  struct{ allowed, denied, unsatisfiable int }
	// wrote is a lower bound of the real time the key's TTL started: when the last admitting
	// request was sent, or the last PERSIST (a settlement may write after either, later).
	wrote time.Time
}

// minTTL is the shortest TTL the scripts set (TTL_MARGIN_MS); persistAfter leaves a stall of
// 800ms between the check and the script's run before it can run out.
const (
	minTTL       = time.Second
	persistAfter = 200 * time.Millisecond
)

func newDiffer(t *testing.T, c *webdisClient, cfg algorithms.Config, key string) *differ {
	lim, err := algorithms.New(cfg)
	if err != nil {
		t.Fatalf("algorithms.New: %v", err)
	}
	return &differ{t: t, c: c, rule: mustRule(t, cfg), lim: lim, key: []byte(key), buf: make([]byte, 0, 512)}
}

// do sends one request; now < 0 means Redis' own clock.
func (d *differ) do(now, n int64) algorithms.Decision {
	d.t.Helper()
	d.keepKey()
	sent := time.Now()
	if now < 0 {
		d.buf = d.rule.AppendEvalSHA(d.buf[:0], d.key, n)
	} else {
		d.buf = d.rule.AppendEvalSHAAt(d.buf[:0], d.key, n, now)
	}
	rep, err := d.c.call(d.buf)
	if errors.Is(err, redis.ErrNoScript) {
		// What the filter does: run the same decision with EVAL, which also loads the script.
		if now < 0 {
			d.buf = d.rule.AppendEval(d.buf[:0], d.key, n)
		} else {
			d.buf = d.rule.AppendEvalAt(d.buf[:0], d.key, n, now)
		}
		rep, err = d.c.call(d.buf)
	}
	if err != nil {
		d.t.Fatalf("%.120q: %v", d.buf, err)
	}
	if now >= 0 && rep.Now != min(now, algorithms.MaxTime) {
		d.t.Fatalf("script decided at %d, asked for %d", rep.Now, now)
	}
	goD, newState := d.lim.AllowN(slices.Clone(d.state), rep.Now, n)
	d.history = append(d.history, step{now: rep.Now, n: n, goD: goD, luaD: rep.Decision})
	if late := !d.wrote.IsZero() && time.Since(d.wrote) >= minTTL; late && d.state != nil {
		if fresh, _ := d.lim.AllowN(nil, rep.Now, n); goD == rep.Decision || fresh == rep.Decision {
			d.t.Logf("step %d took until %v after the key's TTL was set: it may have expired on Redis' clock; both sides start fresh",
				len(d.history)-1, time.Since(d.wrote).Round(time.Millisecond))
			d.redisInt("DEL")
			d.state, d.wrote = nil, time.Time{}
			return rep.Decision
		}
	}
	if goD != rep.Decision {
		var b strings.Builder
		start := max(0, len(d.history)-12)
		for i, s := range d.history[start:] {
			fmt.Fprintf(&b, "\n  #%d now=%d (+%d) n=%d go=%+v", start+i, s.now, s.now-d.history[max(0, start+i-1)].now, s.n, s.goD)
		}
		d.t.Fatalf("decisions differ at step %d (now=%d n=%d, %v of real time since the key's TTL was last set or removed):\n  go  %+v\n  lua %+v\nhistory:%s",
			len(d.history)-1, rep.Now, n, time.Since(d.wrote).Round(time.Millisecond), goD, rep.Decision, b.String())
	}
	switch {
	case goD.Allowed:
		d.wrote = sent
		d.state = append(d.state[:0], newState...)
		d.counts.allowed++
	case goD.Unsatisfiable():
		d.counts.unsatisfiable++
	default:
		d.counts.denied++
	}
	return goD
}

// keepKey removes the TTL of the differ's key once persistAfter has passed since its last
// write, and restarts the Go state if Redis has expired the key already.
func (d *differ) keepKey() {
	d.t.Helper()
	if d.wrote.IsZero() || time.Since(d.wrote) < persistAfter {
		return
	}
	since := time.Since(d.wrote)
	d.wrote = time.Now()
	if !d.redisInt("PERSIST") && !d.redisInt("EXISTS") && d.state != nil && since >= minTTL {
		d.t.Logf("step %d: Redis expired the key on its real clock %v after its last write; the Go state starts fresh too", len(d.history), since.Round(time.Millisecond))
		d.state = nil
	}
}

// redisInt sends the command name on the differ's key through webdis and returns its answer,
// 0 or 1, as a bool.
func (d *differ) redisInt(name string) bool {
	d.t.Helper()
	status, body := d.c.post(redis.Escape([]byte(name+"/"), d.key))
	switch string(body) {
	case `{"` + name + `":0}`:
		return false
	case `{"` + name + `":1}`:
		return true
	}
	d.t.Fatalf("%s: %d %s", name, status, body)
	return false
}

// nextNow picks the next instant: mostly small steps around the emission interval, window
// boundaries, exact retry instants (and 1ns before), long idle periods, and steps backwards
// as between proxies with skewed clocks.
func nextNow(r *rand.Rand, now int64, cfg algorithms.Config, last algorithms.Decision) int64 {
	w := int64(cfg.Window)
	t := max(w/capacity(cfg), 1)
	switch p := r.IntN(100); {
	case p < 8 && last.RetryAfter > 0:
		now += int64(last.RetryAfter) - 1
	case p < 16 && last.RetryAfter > 0:
		now += int64(last.RetryAfter)
	case p < 20 && last.ResetAfter > 0:
		now += int64(last.ResetAfter) - r.Int64N(2)
	case p < 26:
		now += w - now%w - r.Int64N(2) // a window boundary, or 1ns before it
	case p < 34:
		// the same instant: several proxies at once
	case p < 56:
		now += r.Int64N(t/8 + 1) // a burst
	case p < 70:
		now += r.Int64N(2*t + 1)
	case p < 78:
		now += r.Int64N(w + 1)
	case p < 82:
		now += w + r.Int64N(2*w)
	case p < 84:
		now += r.Int64N(int64(40 * 24 * time.Hour)) // hours to weeks of idleness
	case p < 88:
		now = now / 1000 * 1000 // TIME has microsecond resolution
	default:
		now -= r.Int64N(min(w, int64(10*time.Second))/2 + 1) // an earlier clock
	}
	return max(now, 0)
}

func nextN(r *rand.Rand, cfg algorithms.Config) int64 {
	c := capacity(cfg)
	switch p := r.IntN(100); {
	case p < 70:
		return 1
	case p < 85:
		return 1 + r.Int64N(min(c, 5))
	case p < 90:
		return c
	case p < 94:
		return c + 1
	case p < 96:
		return 0
	case p < 98:
		return -1
	default:
		return 1 << 40
	}
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	runDifferential(t, srv.WebdisURL())
}

// runDifferential is TestDifferential against the store behind the webdis at url (one Redis,
// or shards behind a sharding proxy). The configurations run in parallel, each on keys of its
// own and over a connection of its own.
func runDifferential(t *testing.T, url string) {
	starts := []struct {
		name string
		at   int64
	}{
		{"2025", 1_764_480_000_123_456_789},
		{"epoch", 1_500_000_000},                             // timestamps of fewer than 10 digits
		{"maxtime", algorithms.MaxTime - int64(2*time.Hour)}, // crosses the clamp at 2^62 ns
	}
	const steps = 400
	for ci, cfg := range diffConfigs {
		t.Run(cfgName(cfg), func(t *testing.T) {
			t.Parallel()
			c := newClient(t, url)
			for si, st := range starts {
				seq := steps
				if si > 0 {
					seq = steps / 3
				}
				r := rand.New(rand.NewPCG(uint64(ci), uint64(si)))
				d := newDiffer(t, c, cfg, fmt.Sprintf("diff:{%s}:%s", cfgName(cfg), st.name))
				now := st.at
				var last algorithms.Decision
				for i := 0; i < seq; i++ {
					now = nextNow(r, now, cfg, last)
					last = d.do(now, nextN(r, cfg))
				}
				if d.counts.allowed == 0 || d.counts.denied == 0 && si == 0 {
					t.Errorf("%s: weak sequence: %+v", st.name, d.counts)
				}
				t.Logf("%s: %+v", st.name, d.counts)
			}
		})
	}
}

// TestDifferentialRealClock runs without the clock override: the scripts read Redis' TIME,
// and the Go limiter is given the instant each reply reports.
func TestDifferentialRealClock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	for i, cfg := range []algorithms.Config{
		{Algorithm: "token_bucket", Limit: 5, Window: 50 * time.Millisecond, Burst: 3},
		{Algorithm: "leaky_bucket", Limit: 5, Window: 50 * time.Millisecond},
		{Algorithm: "sliding_window", Limit: 5, Window: 20 * time.Millisecond},
		{Algorithm: "sliding_window", Variant: "log", Limit: 5, Window: 20 * time.Millisecond},
		{Algorithm: "fixed_window", Limit: 5, Window: 13 * time.Millisecond},
		{Algorithm: "gcra", Limit: 5, Window: 50 * time.Millisecond, Burst: 2},
	} {
		t.Run(cfgName(cfg), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(i), 99))
			d := newDiffer(t, c, cfg, "real:{"+cfgName(cfg)+"}:k")
			before := time.Now().UnixNano()
			prev := int64(0)
			for j := 0; j < 120; j++ {
				if r.IntN(4) == 0 {
					time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
				}
				d.do(-1, 1+r.Int64N(2))
				now := d.history[len(d.history)-1].now
				if now < prev || now%1000 != 0 {
					t.Fatalf("Redis time %d after %d: not monotone or not whole microseconds", now, prev)
				}
				prev = now
			}
			// The reported clock is Redis' wall clock in Unix ns (same host: within a second).
			if diff := prev - before; diff < -int64(time.Second) || diff > int64(time.Minute) {
				t.Fatalf("Redis time %d is %v away from the test's clock", prev, time.Duration(diff))
			}
			if d.counts.allowed == 0 || d.counts.denied == 0 {
				t.Errorf("weak sequence: %+v", d.counts)
			}
		})
	}
}

func TestNoScriptFallback(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	for _, cfg := range []algorithms.Config{
		{Algorithm: "token_bucket", Limit: 5, Window: time.Hour},
		{Algorithm: "leaky_bucket", Limit: 5, Window: time.Hour},
		{Algorithm: "sliding_window", Limit: 5, Window: time.Hour},
		{Algorithm: "sliding_window", Variant: "log", Limit: 5, Window: time.Hour},
		{Algorithm: "fixed_window", Limit: 5, Window: time.Hour},
		{Algorithm: "gcra", Limit: 5, Window: time.Hour},
	} {
		rule := mustRule(t, cfg)
		key := []byte("noscript:{" + cfgName(cfg) + "}:k")
		sha := rule.Script().SHA
		srv.MustDo("SCRIPT", "FLUSH")
		if _, err := c.call(rule.AppendEvalSHA(nil, key, 1)); !errors.Is(err, redis.ErrNoScript) {
			t.Fatalf("%s: EVALSHA after SCRIPT FLUSH: %v, want ErrNoScript", cfgName(cfg), err)
		}
		rep := c.mustCall(rule.AppendEval(nil, key, 1))
		if !rep.Decision.Allowed || rep.Decision.Remaining != 4 {
			t.Fatalf("%s: EVAL fallback decided %+v, want allowed with 4 left", cfgName(cfg), rep.Decision)
		}
		if got := srv.MustDo("SCRIPT", "EXISTS", sha); fmt.Sprint(got) != "[1]" {
			t.Fatalf("%s: SCRIPT EXISTS after EVAL = %v: EVAL did not load the script under its SHA", cfgName(cfg), got)
		}
		rep = c.mustCall(rule.AppendEvalSHA(nil, key, 1))
		if !rep.Decision.Allowed || rep.Decision.Remaining != 3 {
			t.Fatalf("%s: EVALSHA after the fallback decided %+v, want the state the fallback wrote", cfgName(cfg), rep.Decision)
		}
	}
}

// TestInjection sends keys made of hostile header values and checks that each reached Redis
// as exactly one argument: the script saw the rule's configuration (so no argument was shifted
// or added), exactly the expected key exists with exactly those bytes, and nothing else was
// written.
func TestInjection(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	rule := mustRule(t, algorithms.Config{Algorithm: "fixed_window", Limit: 7, Window: time.Hour})
	want := map[string]bool{}
	check := func(key []byte) {
		t.Helper()
		rep := c.mustCall(rule.AppendEvalSHA(nil, key, 1))
		d := rep.Decision
		if !d.Allowed || d.Limit != 7 || d.Remaining != 6 {
			t.Fatalf("key %q: decision %+v, want a fresh key of the configured rule", trunc(key), d)
		}
		want[string(key)] = true
		if n := srv.Int("EXISTS", string(key)); n != 1 {
			t.Fatalf("key %q does not exist in Redis with exactly its bytes", trunc(key))
		}
		if n := srv.Int("DBSIZE"); n != int64(len(want)) {
			t.Fatalf("after key %q: DBSIZE %d, want %d; keys: %q", trunc(key), n, len(want), srv.Keys())
		}
	}
	for _, h := range hostile() {
		// Raw keys exercise Escape with every hostile byte; AppendKey keys are what the filter
		// sends (the value verbatim, a leading '#' doubled).
		check(append([]byte("inj:{raw}:"), h...))
		key := redis.AppendKey(nil, "inj", "rl", "built", h)
		if !want[string(key)] {
			check(key)
		}
	}
	got := srv.Keys()
	slices.Sort(got)
	var wantKeys []string
	for k := range want {
		wantKeys = append(wantKeys, k)
	}
	slices.Sort(wantKeys)
	if !slices.Equal(got, wantKeys) {
		t.Fatalf("keys in Redis differ from the keys sent")
	}
	// Every key holds exactly the script's state, with its TTL.
	for _, k := range got {
		if typ := srv.MustDo("TYPE", k); typ != "hash" {
			t.Fatalf("key %q is a %v", trunc([]byte(k)), typ)
		}
		if ttl := srv.Int("PTTL", k); ttl <= 0 {
			t.Fatalf("key %q has no TTL (%d)", trunc([]byte(k)), ttl)
		}
	}
}

// TestLongDescriptor sends a descriptor of 64 KiB (the largest max_key_bytes), every byte
// value in it, through the real webdis to Redis, under a rule with a key bound: the key and
// the key set's member hold exactly its bytes, it is counted as one client, and a descriptor
// that differs only in its last byte is another client.
func TestLongDescriptor(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	rule := mustRule(t, algorithms.Config{Algorithm: "fixed_window", Limit: 5, Window: time.Hour}).Bounded(100, "rl", "rl", "api")
	desc := make([]byte, 64<<10)
	for i := range desc {
		desc[i] = byte(i * 7)
	}
	key := redis.AppendKey(nil, "rl", "rl", "api", desc)
	body := rule.AppendEvalSHA(nil, key, 1)
	for n := int64(4); n >= 2; n-- {
		if d := c.mustCall(body).Decision; !d.Allowed || d.Remaining != n {
			t.Fatalf("decision %+v, want allowed with %d remaining", d, n)
		}
	}
	if srv.Int("EXISTS", string(key)) != 1 || srv.MustDo("ZSCORE", "rl:{rl}:api:#keys", string(key)) == nil {
		t.Fatalf("the key or the key set's member does not hold the descriptor's bytes; keys: %d", srv.Int("DBSIZE"))
	}
	desc[len(desc)-1]++
	if d := c.mustCall(rule.AppendEvalSHA(nil, redis.AppendKey(nil, "rl", "rl", "api", desc), 1)).Decision; d.Remaining != 4 {
		t.Fatalf("a descriptor that differs in its last byte: %+v, want a fresh key", d)
	}
	if n := srv.Int("DBSIZE"); n != 3 {
		t.Fatalf("DBSIZE %d, want 2 keys and the key set", n)
	}
	t.Logf("body %d bytes; key %d bytes, MEMORY USAGE %d", len(body), len(key), srv.Int("MEMORY", "USAGE", string(key)))
}

// TestTTL checks that every script gives the key it writes the documented TTL (the time until
// full allowance, rounded up to milliseconds, plus one second), that a denial leaves it alone,
// and that a key really expires.
func TestTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	now := int64(1_764_480_000_000_000_000)
	for _, cfg := range []algorithms.Config{
		{Algorithm: "token_bucket", Limit: 10, Window: time.Minute, Burst: 2},
		{Algorithm: "leaky_bucket", Limit: 10, Window: time.Minute, Burst: 2},
		{Algorithm: "sliding_window", Limit: 2, Window: time.Minute},
		{Algorithm: "sliding_window", Variant: "log", Limit: 2, Window: time.Minute},
		{Algorithm: "fixed_window", Limit: 2, Window: time.Minute},
		{Algorithm: "gcra", Limit: 10, Window: time.Minute, Burst: 2},
	} {
		rule := mustRule(t, cfg)
		key := []byte("ttl:{" + cfgName(cfg) + "}:k")
		var last redis.Reply
		for i := 0; i < 2; i++ {
			last = c.mustCall(rule.AppendEvalSHAAt(nil, key, 1, now+int64(i)*int64(time.Millisecond)))
			if !last.Decision.Allowed {
				t.Fatalf("%s: request %d denied", cfgName(cfg), i)
			}
		}
		want := (int64(last.Decision.ResetAfter)+999_999)/1_000_000 + 1000
		ttl := srv.Int("PTTL", string(key))
		if ttl > want || ttl < want-200 { // 200ms of slack for the test's own latency
			t.Errorf("%s: PTTL %dms, want %dms (reset after %v + 1s)", cfgName(cfg), ttl, want, last.Decision.ResetAfter)
		}
		deny := c.mustCall(rule.AppendEvalSHAAt(nil, key, 1, now+2*int64(time.Millisecond)))
		if deny.Decision.Allowed {
			t.Fatalf("%s: third request allowed", cfgName(cfg))
		}
		if ttl2 := srv.Int("PTTL", string(key)); ttl2 > ttl {
			t.Errorf("%s: a denial extended the TTL from %d to %d", cfgName(cfg), ttl, ttl2)
		}
	}

	// Real expiry, on Redis' clock: 1 event per ms with a burst of 1 is full again after 1ms,
	// so the key lives 1ms + 1s.
	rule := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 1000, Window: time.Second, Burst: 1})
	key := []byte("ttl:{expire}:k")
	c.mustCall(rule.AppendEvalSHA(nil, key, 1))
	if n := srv.Int("EXISTS", string(key)); n != 1 {
		t.Fatal("key not written")
	}
	deadline := time.Now().Add(3 * time.Second)
	for srv.Int("EXISTS", string(key)) == 1 {
		if time.Now().After(deadline) {
			t.Fatalf("key still there after 3s (PTTL %d)", srv.Int("PTTL", string(key)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestForeignState checks that a key of a Redis type no script writes, or holding fields that
// do not decode, is a fresh key, as state with an unknown version byte is in Go; and that a key
// in the v1 encoding (no cfg) is read under the rule's current parameters.
func TestForeignState(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	now := int64(1_764_480_000_000_000_000)
	for i, cfg := range []algorithms.Config{
		{Algorithm: "token_bucket", Limit: 3, Window: time.Hour},
		{Algorithm: "sliding_window", Variant: "log", Limit: 3, Window: time.Hour},
		{Algorithm: "gcra", Limit: 3, Window: time.Hour},
		{Algorithm: "leaky_bucket", Limit: 3, Window: time.Hour},
		{Algorithm: "fixed_window", Limit: 3, Window: time.Hour},
		{Algorithm: "sliding_window", Limit: 3, Window: time.Hour},
	} {
		rule := mustRule(t, cfg)
		for f, foreign := range [][]string{
			{"SET", "not ours"},
			{"SADD", "x"},
			{"HSET", "v", "98", "cfg", "6:3:3600000000000:3", "tat", "12x"},                   // bad field
			{"HSET", "v", "98", "cfg", "6:3:3600000000000", "tat", "1"},                       // bad parameters
			{"HSET", "v", "98", "cfg", "6:3:1000:3", "tat", "1"},                              // a window Go refuses
			{"HSET", "v", "18", "cfg", "6:3:3600000000000:3", "t", "0", "l", "1"},             // version and code disagree
			{"HSET", "v", "1", "t", "0", "l", "1", "ws", "1", "c", "3", "tat", "9"},           // unknown version
			{"RPUSH", "p6:3:3600000000000:3", "1"},                                            // a log header for gcra
			{"RPUSH", "pgarbage", fmt.Sprint(now)},                                            // a bad log header
			{"HSET", "v", "98", "cfg", "06:3:3600000000000:3", "tat", fmt.Sprint(now + 1e12)}, // not canonical
		} {
			key := []byte(fmt.Sprintf("foreign:{r}:%d:%d", i, f))
			srv.MustDo(append([]string{foreign[0], string(key)}, foreign[1:]...)...)
			for j := 0; j < 2; j++ {
				rep := c.mustCall(rule.AppendEvalSHAAt(nil, key, 1, now))
				if want := int64(2 - j); !rep.Decision.Allowed || rep.Decision.Remaining != want {
					t.Fatalf("%s over %v, request %d: %+v, want allowed with %d left", cfgName(cfg), foreign, j, rep.Decision, want)
				}
			}
		}
	}

	// The v1 encoding (no cfg), read under the rule's current parameters.
	win := now - now%int64(time.Hour)
	for _, old := range []struct {
		cfg   algorithms.Config
		state []string
		left  int64 // remaining after one more admission
	}{
		{algorithms.Config{Algorithm: "token_bucket", Limit: 3, Window: time.Hour}, // wg = 3600e9/gcd = 1.2e12
			[]string{"HSET", "v", "17", "t", "2400000000000", "l", fmt.Sprint(now)}, 1},
		{algorithms.Config{Algorithm: "leaky_bucket", Limit: 3, Window: time.Hour},
			[]string{"HSET", "v", "33", "lv", "2400000000000", "l", fmt.Sprint(now)}, 0},
		{algorithms.Config{Algorithm: "fixed_window", Limit: 3, Window: time.Hour},
			[]string{"HSET", "v", "81", "ws", fmt.Sprint(win), "c", "1"}, 1},
		{algorithms.Config{Algorithm: "sliding_window", Limit: 3, Window: time.Hour},
			[]string{"HSET", "v", "49", "ws", fmt.Sprint(win), "p", "0", "c", "2"}, 0},
		{algorithms.Config{Algorithm: "gcra", Limit: 3, Window: time.Hour},
			[]string{"HSET", "v", "97", "tat", fmt.Sprint(now + int64(40*time.Minute))}, 0},
		{algorithms.Config{Algorithm: "sliding_window", Variant: "log", Limit: 3, Window: time.Hour},
			[]string{"RPUSH", fmt.Sprint(now - 1), fmt.Sprint(now)}, 0},
	} {
		key := []byte("old:{r}:" + cfgName(old.cfg))
		srv.MustDo(append([]string{old.state[0], string(key)}, old.state[1:]...)...)
		rule := mustRule(t, old.cfg)
		rep := c.mustCall(rule.AppendEvalSHAAt(nil, key, 1, now))
		if !rep.Decision.Allowed || rep.Decision.Remaining != old.left {
			t.Errorf("%s from %v: %+v, want allowed with %d left", cfgName(old.cfg), old.state, rep.Decision, old.left)
		}
	}
}

// TestBadArguments checks that the script refuses argument lists the encoder never produces,
// instead of deciding on them.
func TestBadArguments(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	sha := redis.Scripts()[0].SHA
	const gcra = "/6/3/3600000000000/3"
	for _, args := range []string{
		"/0",                         // no keys
		"/1/k",                       // no arguments
		"/1/k/1/0",                   // too few
		"/1/k/1/0" + gcra + "/1",     // an odd clock
		"/1/k/1/0" + gcra + "/1/1/1", // too many
		"/1/k/1/0" + gcra + "/1/1000000000",
		"/1/k/x/0" + gcra,
		"/1/k/1e3/0" + gcra,
		"/1/k/1/2" + gcra,                          // shadow not 0 or 1
		"/1/k/1/0/7/3/3600000000000/3",             // unknown algorithm
		"/1/k/1/0/6/0/3600000000000/3",             // limit 0
		"/1/k/1/0/6/3/3600000000001/3",             // not whole milliseconds
		"/1/k/1/0/6/3/3600000000000/0",             // capacity 0
		"/1/k/1/0/6/3/3600000000000/-3",            // negative
		"/1/k/1/0/5/3/3600000000000/4",             // a window with a burst
		"/1/k/1/0/4/2000/3600000000000/2000",       // a log above 1024
		"/1/k/1/0/1/2503/3600000000000/1000000000", // inexact bucket arithmetic
		"/1/k/1/0/6/3/ 3600000000000/3",
		"/2/k/k/1/0" + gcra + "/1/0" + gcra, // the same key twice
		"/2/k/j/1/0" + gcra,                 // one rule's arguments for two keys
	} {
		_, err := c.call([]byte("EVALSHA/" + sha + args))
		var e *redis.Error
		if !errors.As(err, &e) || !strings.Contains(e.Message, "ratelimit: bad arguments") {
			t.Errorf("arguments %q: %v, want the script's bad-arguments error", args, err)
		}
	}
	if n := srv.Int("DBSIZE"); n != 0 {
		t.Errorf("bad calls wrote %d keys", n)
	}
}

// TestFaults checks the codec on what a broken Redis path really answers.
func TestFaults(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	rule := mustRule(t, algorithms.Config{Algorithm: "token_bucket", Limit: 3, Window: time.Second})
	key := []byte("fault:{r}:k")
	c.mustCall(rule.AppendEvalSHA(nil, key, 1))

	srv.StopRedis()
	status, body := c.post(rule.AppendEvalSHA(nil, key, 1))
	if _, err := redis.ParseReply(status, body); !errors.Is(err, redis.ErrUnavailable) || status != 503 {
		t.Fatalf("Redis stopped: status %d, %v; want 503 and ErrUnavailable", status, err)
	}
	srv.StartRedis()
	// webdis reconnects on its own; the script cache is gone with the old process.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.call(rule.AppendEvalSHA(nil, key, 1))
		if errors.Is(err, redis.ErrNoScript) {
			break
		}
		if !errors.Is(err, redis.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("after restarting Redis: %v, want ErrNoScript", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rep := c.mustCall(rule.AppendEval(nil, key, 1)); !rep.Decision.Allowed || rep.Decision.Remaining != 2 {
		t.Fatalf("after restart: %+v, want a fresh key (no persistence)", rep.Decision)
	}

	for _, g := range []struct {
		status int
		body   string
		want   error
	}{
		{200, "garbage", redis.ErrMalformed},
		{200, `{"EVALSHA":[1,2,3]}`, redis.ErrMalformed},
		{200, `{"EVALSHA":[1764480000,1234,0,9007199254740991,0,10,0,250000000,1000`, redis.ErrMalformed},
		{403, "", redis.ErrMalformed},
		{504, "upstream request timeout", redis.ErrUnavailable},
	} {
		gc := newClient(t, redistest.GarbageServer(t, g.status, []byte(g.body)))
		status, body := gc.post(rule.AppendEvalSHA(nil, key, 1))
		if _, err := redis.ParseReply(status, body); !errors.Is(err, g.want) {
			t.Errorf("garbage %d %q: %v, want %v", g.status, g.body, err, g.want)
		}
	}
}

// leastPrivilege is the Redis ACL the package documentation recommends for the user webdis
// logs in as: the commands of the scripts, on the rate-limit keys only.
const leastPrivilege = "on >s3cret resetkeys ~rl:* resetchannels -@all +evalsha +eval +time +hmget +hset +pexpire +del +llen +lindex +lrange +ltrim +lpush +rpush +exists +get +set +zcount +zadd +zremrangebyscore"

// observer is a second Redis user of TestLeastPrivilege that may only read INFO: through it
// the test sees which commands the scripts ran as the least-privilege user, which that user
// may not look at itself.
const observer = "on >observe resetkeys resetchannels -@all +info"

// TestLeastPrivilege runs every script through a webdis whose ACL allows only EVALSHA and EVAL,
// logged in as a Redis user with the recommended ACL, so the documented setup is known to work
// and to refuse anything else: decisions of every algorithm (on the test clock and on Redis'
// own), of a rule with a key bound, an algorithm change on a key, settlements of usage costs
// and the partition secret. Each must answer as it does without an ACL, and every command the
// scripts call must have run at least once and never been refused: a call made with
// redis.pcall that Redis refused would otherwise pass unnoticed. It runs under the default
// key_prefix and under prefixes with braces and every other character the configuration
// accepts, each with the documented ACL's key pattern ~<prefix>:*.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"rl", "{app}", "AZaz09_.-:{rl}"} {
		t.Run(prefix, func(t *testing.T) {
			t.Parallel()
			leastPrivilegeUnder(t, prefix)
		})
	}
}

// leastPrivilegeUnder is TestLeastPrivilege with the keys under prefix.
func leastPrivilegeUnder(t *testing.T, prefix string) {
	acl := strings.Replace(leastPrivilege, " ~rl:* ", " ~"+prefix+":* ", 1)
	args := append([]string{"--user", "default"}, strings.Fields(acl)...)
	args = append(append(args, "--user", "observer"), strings.Fields(observer)...)
	srv := redistest.StartWith(t, redistest.Options{
		RedisArgs: args,
		Webdis: map[string]any{
			"redis_auth": "s3cret",
			"acl": []any{
				map[string]any{"disabled": []string{"*"}},
				map[string]any{"enabled": []string{"EVALSHA", "EVAL"}},
			},
		},
	})
	c := newClient(t, srv.WebdisURL())
	now := int64(1_764_480_000_000_000_000)
	for _, cfg := range diffConfigs {
		rule := mustRule(t, cfg)
		key := redis.AppendKey(nil, prefix, "rl", cfgName(cfg), []byte("client"))
		// EVAL first (the script cache is empty), then EVALSHA; both admit and deny.
		c.mustCall(rule.AppendEvalAt(nil, key, 1, now))
		for j := 0; j < int(cfg.Limit)+2 && j < 60; j++ {
			c.mustCall(rule.AppendEvalSHAAt(nil, key, 1, now+int64(j)))
		}
	}

	// Redis' own clock, as the filter calls; then another algorithm on the same key, whose
	// state replaces the old one and carries its event over.
	clocked := redis.AppendKey(nil, prefix, "rl", "clocked", []byte("client"))
	gcra := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 10, Window: time.Hour})
	if rep := c.mustCall(gcra.AppendEvalSHA(nil, clocked, 1)); !rep.Decision.Allowed || rep.Decision.Remaining != 9 {
		t.Fatalf("on Redis' clock: %+v, want 9 remaining", rep.Decision)
	}
	log := mustRule(t, algorithms.Config{Algorithm: "sliding_window", Variant: "log", Limit: 10, Window: time.Hour})
	if rep := c.mustCall(log.AppendEvalSHA(nil, clocked, 1)); !rep.Decision.Allowed || rep.Decision.Remaining != 8 {
		t.Fatalf("the key changed to a log: %+v, want 8 remaining", rep.Decision)
	}

	// A rule with a key bound: its key set, and its overflow key past the bound.
	// One key and an hour: the first key lives through the test, however slow the machine.
	bounded := mustRule(t, algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: time.Hour}).Bounded(1, prefix, "rl", "bounded")
	for i, wantOverflow := range []bool{false, true} {
		key := redis.AppendKey(nil, prefix, "rl", "bounded", []byte{'a' + byte(i)})
		if a := callOne(t, c, redis.Item{Rule: bounded, Key: key, N: 1}); !a.Decision.Allowed || a.Overflow != wantOverflow {
			t.Fatalf("bounded key %d: %+v, want allowed, overflow %v", i, a, wantOverflow)
		}
	}

	// Settlements: a refund, the same refund sent again (applied once, by its id key), and a
	// debt on a bounded rule's key that has expired or never existed (a new key in its set).
	bucket := mustRule(t, algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: time.Hour})
	settled := redis.AppendKey(nil, prefix, "rl", "settled", []byte("client"))
	if rep := c.mustCall(bucket.AppendEvalSHAAt(nil, settled, 5, now)); rep.Decision.Remaining != 5 {
		t.Fatalf("reservation: %+v, want 5 remaining", rep.Decision)
	}
	settle := func(s redis.Settlement) {
		t.Helper()
		status, body := c.post(redis.AppendSettleSHAAt(nil, &s, now))
		if at, err := redis.ParseSettle(status, body); err != nil || at != now {
			t.Fatalf("settlement of %d on %s: settled at %d, %v (%d %s)", s.Delta, s.Item.Key, at, err, status, body)
		}
	}
	refund := redis.Settlement{Item: redis.Item{Rule: bucket, Key: settled}, Delta: -3, ReservedAt: now, ID: 1}
	for range 2 {
		settle(refund)
		if rep := c.mustCall(bucket.AppendEvalSHAAt(nil, settled, 0, now)); rep.Decision.Remaining != 8 {
			t.Fatalf("after the refund of 3: %+v, want 8 remaining", rep.Decision)
		}
	}
	roomy := mustRule(t, algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: time.Hour}).Bounded(10, prefix, "rl", "roomy")
	debtor := redis.AppendKey(nil, prefix, "rl", "roomy", []byte("client"))
	settle(redis.Settlement{Item: redis.Item{Rule: roomy, Key: debtor}, Delta: 4, ReservedAt: now, ID: 2})
	keySet := string(redis.AppendRuleKey(nil, prefix, "rl", "roomy", 1, 0, "#keys"))
	if srv.Int("EXISTS", string(debtor)) != 1 || srv.Int("ZCOUNT", keySet, "-inf", "+inf") != 1 {
		t.Fatalf("a debt on a new key of a bounded rule: want the key and its entry in %s", keySet)
	}
	if rep := c.mustCall(roomy.AppendEvalSHAAt(nil, debtor, 0, now)); rep.Decision.Remaining != 6 {
		t.Fatalf("after a debt of 4: %+v, want 6 remaining", rep.Decision)
	}

	// The partition secret: stored by the first call, read back by the next.
	secretKey := redis.AppendSecretKey(nil, prefix, "rl")
	ask := func(candidate redis.Secret) redis.Secret {
		t.Helper()
		status, body := c.post(redis.AppendSecretCall(nil, secretKey, &candidate))
		s, err := redis.ParseSecret(status, body)
		if err != nil {
			t.Fatalf("partition secret: %v (%d %s)", err, status, body)
		}
		return s
	}
	first, second := redis.NewSecret(), redis.NewSecret()
	if got := ask(first); got != first {
		t.Fatalf("first secret call: %x, want its candidate %x", got, first)
	}
	if got := ask(second); got != first {
		t.Fatalf("second secret call: %x, want the stored %x", got, first)
	}

	stats := commandStats(t, srv.RedisAddr(), "observer", "observe")
	for _, cmd := range append(scriptCommands(t), "eval", "evalsha") {
		if st := stats[cmd]; st.calls == 0 || st.rejected != 0 {
			t.Errorf("%s ran %d times and was refused %d times as the least-privilege user, want at least once and never",
				cmd, st.calls, st.rejected)
		}
	}

	if status, _ := c.post([]byte("SET/rl:x/1")); status != 403 {
		t.Errorf("webdis ACL let SET through: %d", status)
	}
	_, err := c.call([]byte("EVAL/return%20redis%2Ecall%28%27SET%27%2C%27other%27%2C%271%27%29/0"))
	if !errors.Is(err, redis.ErrRedis) {
		t.Errorf("a script writing outside rl:* ran: %v", err)
	}
}

// commandStat is what Redis counts of one command (INFO commandstats): the calls it ran, and
// those it refused (a user's ACL, a full memory).
type commandStat struct{ calls, rejected int64 }

// commandStats reads INFO commandstats from the Redis at addr, logged in as user.
func commandStats(t *testing.T, addr, user, password string) map[string]commandStat {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	// Inline commands: the user name and password hold no spaces.
	if _, err := fmt.Fprintf(conn, "AUTH %s %s\r\nINFO commandstats\r\n", user, password); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	if line, err := rd.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("AUTH %s: %q, %v", user, line, err)
	}
	line, err := rd.ReadString('\n')
	n, convErr := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(line, "$"), "\r\n"))
	if err != nil || convErr != nil || !strings.HasPrefix(line, "$") {
		t.Fatalf("INFO commandstats: %q, %v", line, err)
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(rd, info); err != nil {
		t.Fatal(err)
	}
	// Lines such as cmdstat_get:calls=3,usec=5,usec_per_call=1.67,rejected_calls=0,failed_calls=0
	stats := map[string]commandStat{}
	for _, l := range strings.Split(string(info), "\r\n") {
		name, fields, ok := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":")
		if !ok || len(name) == len(l) {
			continue
		}
		var st commandStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "rejected_calls":
				st.rejected, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		stats[name] = st
	}
	if len(stats) == 0 {
		t.Fatalf("INFO commandstats counts no command: %q", info)
	}
	return stats
}

// BenchmarkRoundTrip measures one real EVALSHA through webdis on loopback, the cost of one
// global decision without Envoy, and reports the latency percentiles.
func BenchmarkRoundTrip(b *testing.B) {
	srv := redistest.Start(b)
	c := newClient(b, srv.WebdisURL())
	rule := mustRule(b, algorithms.Config{Algorithm: "gcra", Limit: 1_000_000, Window: time.Second, Burst: 1000})
	key := redis.AppendKey(nil, "rl", "rl", "bench", []byte("203.0.113.7"))
	body := make([]byte, 0, 512)
	c.mustCall(rule.AppendEval(nil, key, 1)) // load the script
	lat := make([]time.Duration, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		body = rule.AppendEvalSHA(body[:0], key, 1)
		if _, err := c.call(body); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
}

// TestWebdisQuirks pins down what webdis does with the bytes Escape encodes, so an upgrade of
// webdis that changes any of it is noticed. Each case is a raw body (not escaped) and what
// reached Redis.
func TestWebdisQuirks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	keyed := []struct {
		body, key, value string
		why              string
	}{
		{"SET/a+b/v", "a b", "v", "'+' is decoded to a space"},
		{"SET/a%2Bb/v", "a+b", "v", "%2B is a plus"},
		{"SET/a%2fb/v", "a/b", "v", "lower-case hex is decoded too"},
		{"SET/c%zz/v%", "c%zz", "v%", "a '%' without two hex digits stays"},
		{"SET/d\x00e\r\nf\xff/v", "d\x00e\r\nf\xff", "v", "raw NUL, CR, LF and non-UTF-8 pass through"},
		{"SET/g h\t/v", "g h\t", "v", "raw spaces and tabs pass through"},
		{"SET/k1/v.json", "k1", "v", "a known extension is stripped from the last argument"},
		{"SET/k2/v.foo", "k2", "v.foo", "an unknown extension is kept"},
		{"SET/k3/", "k3", "", "a trailing '/' sends an empty argument"},
		{"SET/k4/v?x=1", "k4", "v", "a raw '?' cuts the body"},
		{"SET/{a}:b.c/v", "{a}:b.c", "v", "raw braces, and ':' and '.' inside an argument, pass through"},
		{"SET/%7Bx%7d/v", "{x}", "v", "encoded braces are decoded"},
	}
	for _, k := range keyed {
		if status, body := c.post([]byte(k.body)); status != 200 || !strings.Contains(string(body), `"OK"`) {
			t.Fatalf("%q: %d %s", k.body, status, body)
		}
		if got, err := srv.Do("GET", k.key); err != nil || got != k.value {
			t.Errorf("%q: GET %q = %q, %v; want %q (%s)", k.body, k.key, got, err, k.value, k.why)
		}
	}
	if n := srv.Int("DBSIZE"); n != int64(len(keyed)) {
		t.Errorf("DBSIZE %d, want %d: %q", n, len(keyed), srv.Keys())
	}

	// A '.txt' extension turns the JSON answer into text: an unescaped '.' in the last
	// argument would make the reply unparseable.
	req, _ := http.NewRequest("POST", srv.WebdisURL(), strings.NewReader("PING/x.txt"))
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain" {
		t.Errorf(".txt answered Content-Type %q, want text/plain", ct)
	}

	for _, r := range []struct{ body, want string }{
		{"SET/a?b/v", `{"SET":[false,"ERR wrong number of arguments for 'set' command"]}`},
		{"EVAL/return%20redis.error_reply('%FF')/0", `{"EVAL":[false]}`},
		{"EVAL/return%20{1,'%FF',2}/0", `{"EVAL":[1,2]}`},
		{"EVAL/return%20{1,{2},3}/0", `{"EVAL":[1,null,3]}`},
		{"EVAL/return%201.9/0", `{"EVAL":1}`},
	} {
		if status, body := c.post([]byte(r.body)); status != 200 || string(body) != r.want {
			t.Errorf("%q answered %d %s, want %s", r.body, status, body, r.want)
		}
	}
	var e *redis.Error
	if _, err := redis.ParseReply(200, []byte(`{"EVAL":[false]}`)); !errors.As(err, &e) || e.Message != "" {
		t.Errorf("a dropped error message decodes to %v", err)
	}
	if status, _ := c.post(nil); status != 403 {
		t.Errorf("empty body answered %d, want 403", status)
	}
}
