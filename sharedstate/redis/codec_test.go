package redis_test

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// webdisDecode is webdis 0.1.9's decode_uri for one argument (src/cmd.c): %XX with two hex
// digits is decoded, '+' becomes a space, everything else is kept. The unit tests use it as the
// reference for what Redis receives; the integration tests check the real thing.
func webdisDecode(arg []byte) []byte {
	out := make([]byte, 0, len(arg))
	for i := 0; i < len(arg); i++ {
		c := arg[i]
		switch {
		case c == '+':
			c = ' '
		case c == '%' && i+2 < len(arg) && isHex(arg[i+1]) && isHex(arg[i+2]):
			b, _ := hex.DecodeString(string(arg[i+1 : i+3]))
			c = b[0]
			i += 2
		}
		out = append(out, c)
	}
	return out
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// hostile are header values a client controls, chosen for what webdis does with them.
func hostile() [][]byte {
	var big4k []byte
	for i := 0; i < 4096; i++ {
		big4k = append(big4k, byte(i*7+i>>8))
	}
	return [][]byte{
		[]byte("/"), []byte("a/b"), []byte("%2F"), []byte("%2f"), []byte("%"), []byte("%%"),
		[]byte("%zz"), []byte("%4"), []byte("+"), []byte("a+b"), []byte("?"), []byte("a?jsonp=x"),
		[]byte(".json"), []byte("x.txt"), []byte("x.raw"), []byte("."), []byte(".."), []byte("\n"),
		[]byte("a\r\nb"), []byte("\x00"), []byte("a\x00b"), []byte(" "), []byte("a b"), []byte("\t"),
		[]byte("\xff\xfe"), []byte("\xc3\x28"), []byte("\xed\xa0\x80"), big4k,
		bytes.Repeat([]byte("/"), 4096), bytes.Repeat([]byte("%2F"), 1400),
		[]byte("EVALSHA/0000/1/x"), []byte("x/1/1000000/1000000/1/1"), []byte("x/0/0"),
		[]byte("#"), []byte("#abc"), []byte("{"), []byte("}"), []byte("{rule}"), []byte("&"),
		[]byte("="), []byte("\""), []byte("\\"), []byte("'"), []byte("]"), []byte(":"),
		[]byte("ключ"), []byte("🚦"), []byte(""), []byte("0"), []byte("-1"),
	}
}

func TestEscapeOnlySafeBytes(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	out := redis.Escape(nil, all)
	checkEscaped(t, all, out)
	for _, h := range hostile() {
		checkEscaped(t, h, redis.Escape(nil, h))
	}
	// Escape appends: what is already in dst is kept.
	if got := string(redis.Escape([]byte("x/"), []byte("a/b"))); got != "x/a%2Fb" {
		t.Fatalf("Escape appended %q", got)
	}
}

// checkEscaped verifies that out is made of [A-Za-z0-9_-] and %XX only, and decodes (as
// webdis decodes) to exactly in.
func checkEscaped(t *testing.T, in, out []byte) {
	t.Helper()
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		case c == '%' && i+2 < len(out) && strings.IndexByte("0123456789ABCDEF", out[i+1]) >= 0 &&
			strings.IndexByte("0123456789ABCDEF", out[i+2]) >= 0:
			i += 2
		default:
			t.Fatalf("Escape(%q) = %q: unsafe byte %q at %d", trunc(in), trunc(out), c, i)
		}
	}
	if got := webdisDecode(out); !bytes.Equal(got, in) {
		t.Fatalf("Escape(%q) = %q decodes to %q", trunc(in), trunc(out), trunc(got))
	}
}

func trunc(b []byte) []byte {
	if len(b) > 40 {
		return append(b[:40:40], "..."...)
	}
	return b
}

func TestEscapeRandomRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 0, 3*512)
	for i := 0; i < 2000; i++ {
		in := make([]byte, r.IntN(512))
		for j := range in {
			in[j] = byte(r.UintN(256))
		}
		buf = redis.Escape(buf[:0], in)
		checkEscaped(t, in, buf)
	}
}

func FuzzEscape(f *testing.F) {
	for _, h := range hostile() {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkEscaped(t, in, redis.Escape(nil, in))
	})
}

func TestAppendKey(t *testing.T) {
	cases := []struct {
		prefix, domain, rule string
		desc                 []byte
		want                 string
	}{
		{"rl", "rl", "api", []byte("203.0.113.7"), "rl:{rl}:api:203.0.113.7"},
		{"rl", "prod", "api", []byte(""), "rl:{prod}:api:"},
		{"rl", "rl", "api", []byte("key/with?odd.chars+%"), "rl:{rl}:api:key/with?odd.chars+%"},
		{"rl", "rl", "per-tenant:v1", []byte("t1"), "rl:{rl}:per-tenant%3Av1:t1"},
		{"rl", "d:x", "r", []byte("t1"), "rl:{d%3Ax}:r:t1"},
		{"rl", "a{b}c", "a{b}c", []byte("x"), "rl:{a%7Bb%7Dc}:a%7Bb%7Dc:x"},
		{"r{l", "d", "a b", []byte("x"), "r{l:{d}:a%20b:x"},
		{"{app}", "rl", "api", []byte("{u}"), "{app}:{rl}:api:{u}"},
		{"app:rl", "d", "api", []byte("100%"), "app:rl:{d}:api:100%"},
	}
	for _, c := range cases {
		if got := string(redis.AppendKey(nil, c.prefix, c.domain, c.rule, c.desc)); got != c.want {
			t.Errorf("AppendKey(%q, %q, %q, %q) = %q, want %q", c.prefix, c.domain, c.rule, c.desc, got, c.want)
		}
	}
	// The domain is part of the key: two deployments with the same rule never share a counter.
	if a, b := redis.AppendKey(nil, "rl", "team-a", "api", []byte("k")), redis.AppendKey(nil, "rl", "team-b", "api", []byte("k")); bytes.Equal(a, b) {
		t.Errorf("domains team-a and team-b share the key %q", a)
	}
	// Any other descriptor is written verbatim too, a leading '#' doubled.
	for d, want := range map[string]string{
		"a b": "rl:{rl}:api:a b", "\n\xff\x00": "rl:{rl}:api:\n\xff\x00", "ключ": "rl:{rl}:api:ключ",
		"#": "rl:{rl}:api:##", "#keys": "rl:{rl}:api:##keys", "##": "rl:{rl}:api:###",
	} {
		if got := string(redis.AppendKey(nil, "rl", "rl", "api", []byte(d))); got != want {
			t.Errorf("AppendKey(%q) = %q, want %q", d, got, want)
		}
	}
	// No two descriptors share a key, and none has the key of the rule's key set, its overflow
	// key or the partition secret; a key is as long as its descriptor and the head.
	seen := map[string][]byte{}
	for _, k := range []string{
		string(redis.AppendRuleKey(nil, "rl", "rl", "api", 1, 0, "#keys")),
		string(redis.AppendRuleKey(nil, "rl", "rl", "api", 1, 0, "#overflow")),
		string(redis.AppendSecretKey(nil, "rl", "rl")),
	} {
		seen[k] = []byte("(the rule's own key)")
	}
	descs := append(hostile(), []byte("a"), []byte("b"), []byte("keys"), []byte("#keys"), []byte("##keys"),
		[]byte("overflow"), []byte("#overflow"), []byte("#partition-secret"), []byte("##"), []byte("###"),
		bytes.Repeat([]byte{0xff}, 64<<10))
	for _, d := range descs {
		key := string(redis.AppendKey(nil, "rl", "rl", "api", d))
		extra := 0
		if len(d) > 0 && d[0] == '#' {
			extra = 1
		}
		if len(key) != len("rl:{rl}:api:")+len(d)+extra {
			t.Errorf("key for %q is %d bytes", trunc(d), len(key))
		}
		if prev, dup := seen[key]; dup && !bytes.Equal(prev, d) {
			t.Errorf("descriptors %q and %q share the key %q", trunc(prev), trunc(d), key)
		}
		seen[key] = d
	}
	if n := testing.AllocsPerRun(100, func() {
		var buf [96]byte
		redis.AppendKey(buf[:0], "rl", "rl", "api", []byte("a b c"))
	}); n != 0 {
		t.Errorf("AppendKey allocates %v times per call", n)
	}
}

// TestRuleAppendKey checks that a rule builds the keys AppendPartKey builds under the names it
// was partitioned with, in every partition, whatever the descriptor, and that it does not
// allocate.
func TestRuleAppendKey(t *testing.T) {
	base := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 10, Window: time.Minute})
	descs := append(hostile(), []byte(""), []byte("k"), []byte("#k"), []byte("##"))
	for _, parts := range []int{1, 64} {
		for _, maxKeys := range []int64{0, 1000} {
			rule := base.Partitioned(parts, maxKeys, "r{l", "d:x", "per-tenant:v1")
			for part := range parts {
				for _, d := range descs {
					got, want := rule.AppendKey(nil, part, d), redis.AppendPartKey(nil, "r{l", "d:x", "per-tenant:v1", parts, part, d)
					if !bytes.Equal(got, want) {
						t.Fatalf("partitions %d, part %d, %q: %q, want %q", parts, part, trunc(d), got, want)
					}
				}
			}
		}
	}
	rule := base.Partitioned(1, 0, "rl", "rl", "api")
	if n := testing.AllocsPerRun(100, func() {
		var buf [96]byte
		rule.AppendKey(buf[:0], 0, []byte("a b c"))
	}); n != 0 {
		t.Errorf("Rule.AppendKey allocates %v times per call", n)
	}
}

func TestScripts(t *testing.T) {
	names := map[string]bool{}
	for _, s := range redis.Scripts() {
		sum := sha1.Sum([]byte(s.Source))
		if s.SHA != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: SHA %s is not the SHA1 of Source", s.Name, s.SHA)
		}
		if names[s.Name] {
			t.Errorf("duplicate script %s", s.Name)
		}
		names[s.Name] = true
		for _, line := range strings.Split(s.Source, "\n") {
			if strings.HasPrefix(line, "--") || strings.HasPrefix(line, " ") {
				t.Errorf("%s: comment or indentation left in Source: %q", s.Name, line)
			}
		}
	}
	// One script for every algorithm, so that one call can decide several rules together.
	if len(names) != 1 {
		t.Errorf("%d scripts, want 1", len(names))
	}
}

func mustRule(t testing.TB, c algorithms.Config) *redis.Rule {
	t.Helper()
	r, err := redis.NewRule(c)
	if err != nil {
		t.Fatalf("NewRule(%+v): %v", c, err)
	}
	return r
}

func TestNewRule(t *testing.T) {
	for _, c := range []algorithms.Config{
		{Algorithm: "adaptive", Limit: 10, Window: time.Second, MinLimit: 1},
		{Algorithm: "leaky_bucket", Limit: 10, Window: time.Second, MaxDelay: time.Second},
		{Algorithm: "token_bucket", Limit: 0, Window: time.Second},
		{Algorithm: "nope", Limit: 1, Window: time.Second},
	} {
		if _, err := redis.NewRule(c); err == nil {
			t.Errorf("NewRule(%+v) succeeded", c)
		}
	}
	// The bodies, byte for byte, for one configuration of each argument layout.
	key := []byte("rl:{api}:1.2.3.4")
	ekey := "rl%3A%7Bapi%7D%3A1%2E2%2E3%2E4"
	for _, c := range []struct {
		cfg  algorithms.Config
		name string
		args string
	}{
		{algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: time.Second, Burst: 20}, "ratelimit", "/1/10/1000000000/20/0"},
		{algorithms.Config{Algorithm: "leaky_bucket", Limit: 6, Window: time.Minute}, "ratelimit", "/2/6/60000000000/6/0"},
		{algorithms.Config{Algorithm: "sliding_window", Limit: 5, Window: 1300 * time.Millisecond}, "ratelimit", "/3/5/1300000000/5/0"},
		{algorithms.Config{Algorithm: "sliding_window", Variant: "log", Limit: 5, Window: time.Hour}, "ratelimit", "/4/5/3600000000000/5/0"},
		{algorithms.Config{Algorithm: "fixed_window", Limit: 100, Window: time.Minute}, "ratelimit", "/5/100/60000000000/100/0"},
		{algorithms.Config{Algorithm: "gcra", Limit: 3, Window: time.Second, Burst: 2}, "ratelimit", "/6/3/1000000000/2/0"},
	} {
		r := mustRule(t, c.cfg)
		if r.Script().Name != c.name || r.Limit() != c.cfg.Limit {
			t.Errorf("%+v: script %s, limit %d", c.cfg, r.Script().Name, r.Limit())
		}
		// n 3, enforced (shadow 0), then the rule's algorithm code and parameters, then the
		// request's own cost (3: no lease batch), no give-back (0 units, at 0), and the call's id.
		want := "EVALSHA/" + r.Script().SHA + "/1/" + ekey + "/3/0" + c.args + "/3/0/0/9007199254740991"
		if got := string(r.AppendEvalSHA(nil, key, 3)); got != want {
			t.Errorf("%s: AppendEvalSHA = %q, want %q", c.name, got, want)
		}
		eval := string(r.AppendEval(nil, key, 3))
		src, tail, ok := strings.Cut(strings.TrimPrefix(eval, "EVAL/"), "/")
		if !ok || string(webdisDecode([]byte(src))) != r.Script().Source || tail != "1/"+ekey+"/3/0"+c.args+"/3/0/0/9007199254740991" {
			t.Errorf("%s: AppendEval body does not carry the script and the same arguments", c.name)
		}
		checkEscaped(t, []byte(r.Script().Source), []byte(src))
	}
}

// A valid reply body, and the Reply it decodes to.
const okBody = `{"EVALSHA":[1764480000,123456000,0,9007199254740991,0,10,0,250000000,1000000000,0]}`

var okReply = redis.Reply{
	Decision: algorithms.Decision{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: 250 * time.Millisecond, ResetAfter: time.Second},
	Now:      1764480000123456000,
}

func TestParseReply(t *testing.T) {
	ok := []struct {
		body string
		want redis.Reply
	}{
		{okBody, okReply},
		{" {\n\"EVAL\" : [1764480000,123456000 , 0 , 9007199254740991 , 0 ,10,0, 250000000,1000000000,0] }\r\n", okReply},
		{`{"EVALSHA":[0,0,1,9007199254740991,1,5,4,0,200000000,0]}`, redis.Reply{Decision: algorithms.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 200 * time.Millisecond}}},
	}
	for _, c := range ok {
		got, err := redis.ParseReply(200, []byte(c.body))
		if err != nil || got != c.want {
			t.Errorf("ParseReply(%q) = %+v, %v; want %+v", c.body, got, err, c.want)
		}
	}

	type check func(error) bool
	is := func(target error) check { return func(err error) bool { return errors.Is(err, target) } }
	redisMsg := func(msg string) check {
		return func(err error) bool {
			var e *redis.Error
			return errors.As(err, &e) && e.Message == msg && errors.Is(err, redis.ErrRedis)
		}
	}
	bad := []struct {
		status int
		body   string
		want   check
	}{
		{200, `{"EVALSHA":[false,"NOSCRIPT No matching script. Please use EVAL."]}`, is(redis.ErrNoScript)},
		{200, `{"EVALSHA":[false,"ERR ratelimit: bad arguments (count)"]}`, redisMsg("ERR ratelimit: bad arguments (count)")},
		{200, `{"EVALSHA":[false,"WRONGTYPE a \"b\" \\ \/ \u00e9 \ud83d\udea6 \n"]}`, redisMsg("WRONGTYPE a \"b\" \\ / é 🚦 \n")},
		{200, `{"EVALSHA":[false]}`, redisMsg("")},
		{200, `{"EVALSHA":[false,"NOSCRIPT"]}`, redisMsg("NOSCRIPT")},
		{503, ``, is(redis.ErrUnavailable)},
		{502, `upstream connect error`, is(redis.ErrUnavailable)},
		{504, `upstream request timeout`, is(redis.ErrUnavailable)},
		{403, ``, is(redis.ErrMalformed)},
		{404, okBody, is(redis.ErrMalformed)},
		{500, okBody, is(redis.ErrMalformed)},
		{0, okBody, is(redis.ErrMalformed)},
		{200, ``, is(redis.ErrMalformed)},
		{200, `null`, is(redis.ErrMalformed)},
		{200, `{}`, is(redis.ErrMalformed)},
		{200, `[]`, is(redis.ErrMalformed)},
		{200, `not json at all`, is(redis.ErrMalformed)},
		{200, `<html>502 Bad Gateway</html>`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":null}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":1}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":"x"}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[true,"OK"]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[1,null,4]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,1,9007199254740991,1,5,4,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,1,9007199254740991,1,5,4,0,200000000,0,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,0,9007199254740991,1,5,4,0,200000000,0]}`, is(redis.ErrMalformed)}, // allowed, not committed
		{200, `{"EVALSHA":[0,0,1,9007199254740991,0,5,4,7,200000000,0]}`, is(redis.ErrMalformed)}, // denied, committed
		{200, `{"EVALSHA":[0,0,2,9007199254740991,1,5,4,0,200000000,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,1,9007199254740990,1,5,4,0,200000000,0]}`, is(redis.ErrMalformed)}, // another call's id
		{200, `{"EVALSHA":[0,0,1,1,5,4,0,200000000,0]}`, is(redis.ErrMalformed)},                  // no id
		{200, `{"EVALSHA":[0,0.5,1,9007199254740991,1,5,4,0,200000000,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,1,9007199254740991,1,5,4,0,2e8,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[1,5,4,9007199254740991,0,"2",0,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,01,9007199254740991,01,5,4,0,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,2,9007199254740991,2,5,4,0,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,1,9007199254740991,1,0,4,0,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,1,9007199254740991,1,5,-1,0,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,1,9007199254740991,1,5,4,7,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,1,9007199254740991,1,5,4,0,2,2]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,0,9007199254740991,0,5,4,-7,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,0,9007199254740991,0,5,4,7,-2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[-1,0,0,9007199254740991,0,5,4,7,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,1000000000,0,9007199254740991,0,5,4,7,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[9223372036,0,0,9007199254740991,0,5,4,7,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[99999999999999999999,0,0,9007199254740991,0,5,4,7,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,0,9007199254740991,0,5,4,9223372036854775808,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,0,9007199254740991,0,5,4,-9223372036854775809,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,0,9007199254740991,0,5,4,7,2,0]}x`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[0,0,0,9007199254740991,0,5,4,7,2,0],"GET":1}`, is(redis.ErrMalformed)},
		{200, `{"GET":[0,0,0,0,5,4,7,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVAL\u0053HA":[0,0,0,0,5,4,7,2,0]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[false,"bad \x escape"]}`, is(redis.ErrMalformed)},
		{200, "{\"EVALSHA\":[false,\"raw \x01 control\"]}", is(redis.ErrMalformed)},
		{200, "{\"EVALSHA\":[false,\"bad utf8 \xff\"]}", is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[false,"x",1]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[false,"\u12"]}`, is(redis.ErrMalformed)},
		{200, `{"EVALSHA":[false,"lone \ud83d surrogate"]}`, is(redis.ErrMalformed)},
	}
	for _, c := range bad {
		got, err := redis.ParseReply(c.status, []byte(c.body))
		if err == nil || !c.want(err) || got != (redis.Reply{}) {
			t.Errorf("ParseReply(%d, %q) = %+v, %v", c.status, c.body, got, err)
		}
	}
	// Every truncation of a valid reply is malformed (a cut callout body must never decode).
	for _, body := range []string{okBody, `{"EVALSHA":[false,"NOSCRIPT No matching script."]}`} {
		for i := 0; i < len(body); i++ {
			if _, err := redis.ParseReply(200, []byte(body[:i])); !errors.Is(err, redis.ErrMalformed) {
				t.Errorf("ParseReply(%q) = %v, want ErrMalformed", body[:i], err)
			}
		}
	}
}

// TestParseReplies decodes the answer of a call with several rules, and refuses answers that do
// not fit the call: another number of rules, another rule's limit, another call's id, a commit flag that
// contradicts the decisions.
func TestParseReplies(t *testing.T) {
	a := mustRule(t, algorithms.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Hour})
	b := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 20, Window: time.Hour})
	items := []redis.Item{{Rule: a, Key: []byte("a")}, {Rule: b, Key: []byte("b"), Shadow: true}}
	out := make([]redis.Answer, 2)

	// The shadow rule denies, the enforced one admits: committed.
	now, committed, err := redis.ParseReplies(200, []byte(`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,1]}`), redis.TestCallID, items, out)
	if err != nil || now != 7_000_000_008 || !committed ||
		out[0] != (redis.Answer{Decision: algorithms.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 5}, Now: now}) ||
		out[1] != (redis.Answer{Decision: algorithms.Decision{Limit: 20, RetryAfter: 9, ResetAfter: 10}, Overflow: true, Now: now}) {
		t.Errorf("shadow denial: %d %v %v %+v", now, committed, err, out)
	}
	// The enforced rule denies: not committed.
	if _, committed, err := redis.ParseReplies(200, []byte(`{"EVALSHA":[7,8,0,9007199254740991,0,2,0,3,5,0,1,20,19,0,10,0]}`), redis.TestCallID, items, out); err != nil || committed {
		t.Errorf("enforced denial: %v %v", committed, err)
	}
	for _, body := range []string{
		`{"EVALSHA":[7,8,0,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,0]}`,  // nothing denied, yet not committed
		`{"EVALSHA":[7,8,1,9007199254740991,0,2,0,3,5,0,1,20,19,0,10,0]}`, // enforced denial, yet committed
		`{"EVALSHA":[7,8,1,9007199254740991,1,3,1,0,5,0,0,20,0,9,10,0]}`,  // the first rule's limit is not 2
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,2,0,20,0,9,10,0]}`,  // gave back, for an item that gives nothing back
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,3,0,20,0,9,10,0]}`,  // gave back on the overflow key
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,4,0,20,0,9,10,0]}`,  // flags is not 0, 1 or 2
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,3,0,5,0,0,20,0,9,10,0]}`,  // remaining 3 of a limit of 2
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,21,9,10,0]}`, // remaining 21 of a limit of 20
		`{"EVALSHA":[7,8,1,7,1,2,1,0,5,0,0,20,0,9,10,1]}`,                 // the answer to another call (id 7)
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0]}`,                // one rule's answer for two
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,0,1,2,1,0,5,0]}`,
	} {
		if _, _, err := redis.ParseReplies(200, []byte(body), redis.TestCallID, items, out); !errors.Is(err, redis.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", body, err)
		}
	}
	// Flags 2: the item's give-back was applied.
	giving := []redis.Item{{Rule: a, Key: []byte("a"), GiveBack: 3}, items[1]}
	if _, _, err := redis.ParseReplies(200, []byte(`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,2,0,20,0,9,10,0]}`), redis.TestCallID, giving, out); err != nil ||
		!out[0].GaveBack || out[0].Overflow || out[1].GaveBack {
		t.Errorf("give-back applied: %v %+v", err, out)
	}
	if _, _, err := redis.ParseReplies(200, []byte(`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,0]}`), redis.TestCallID, giving, out); err != nil || out[0].GaveBack {
		t.Errorf("give-back not applied: %v %+v", err, out)
	}
	// Remaining is bounded by the capacity, not the limit: a token bucket of limit 2 and
	// burst 5 may report 4 remaining, and not 6.
	burst := []redis.Item{{Rule: mustRule(t, algorithms.Config{Algorithm: "token_bucket", Limit: 2, Burst: 5, Window: time.Hour}), Key: []byte("c")}}
	if _, _, err := redis.ParseReplies(200, []byte(`{"EVALSHA":[7,8,1,9007199254740991,1,2,4,0,5,0]}`), redis.TestCallID, burst, out[:1]); err != nil || out[0].Decision.Remaining != 4 {
		t.Errorf("remaining 4 of a burst of 5: %v %+v", err, out[0])
	}
	if _, _, err := redis.ParseReplies(200, []byte(`{"EVALSHA":[7,8,1,9007199254740991,1,2,6,0,5,0]}`), redis.TestCallID, burst, out[:1]); !errors.Is(err, redis.ErrMalformed) {
		t.Errorf("remaining 6 of a burst of 5: %v, want ErrMalformed", err)
	}
	if _, _, err := redis.ParseReplies(200, []byte(`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,0]}`), redis.TestCallID, items, out[:1]); !errors.Is(err, redis.ErrMalformed) {
		t.Errorf("short out: %v", err)
	}
}

func FuzzParseReply(f *testing.F) {
	for _, s := range []string{okBody, `{"EVALSHA":[false,"NOSCRIPT x"]}`, `{"EVALSHA":[false]}`,
		`{"EVAL":[0,0,1,9007199254740991,1,5,4,0,200000000,0]}`, `{"EVALSHA":[false,"\ud83d\udea6"]}`, ``, `null`} {
		f.Add(200, []byte(s))
	}
	f.Add(503, []byte(nil))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		r, err := redis.ParseReply(status, body)
		if err != nil {
			if r != (redis.Reply{}) {
				t.Fatalf("error %v with a non-zero reply", err)
			}
			if !errors.Is(err, redis.ErrMalformed) && !errors.Is(err, redis.ErrUnavailable) &&
				!errors.Is(err, redis.ErrRedis) && !errors.Is(err, redis.ErrNoScript) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		d := r.Decision
		if status != 200 || d.Limit < 1 || d.Remaining < 0 || d.RetryAfter < 0 || d.ResetAfter < 0 ||
			(d.Allowed && d.RetryAfter != 0) || r.Now < 0 || d.Delay != 0 {
			t.Fatalf("accepted an invalid reply %+v from %d %q", r, status, body)
		}
	})
}

func TestHotPathAllocs(t *testing.T) {
	rule := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 100, Window: time.Second})
	buf := make([]byte, 0, 512)
	body := []byte(okBody)
	desc := []byte("203.0.113.7")
	if n := testing.AllocsPerRun(200, func() {
		key := redis.AppendKey(buf[:0], "rl", "rl", "api", desc)
		req := rule.AppendEvalSHA(key[len(key):], key, 1)
		if _, err := redis.ParseReply(200, body); err != nil || len(req) == 0 {
			t.Fatal(err)
		}
		if _, err := redis.ParseReply(503, nil); err == nil {
			t.Fatal("503 accepted")
		}
	}); n != 0 {
		t.Errorf("%v allocations per decision, want 0", n)
	}
}

// TestHotPathAllocsThreeRules: a call for three rules, one of them bounded, is built and its
// answer parsed without allocating once the buffers exist.
func TestHotPathAllocsThreeRules(t *testing.T) {
	a := mustRule(t, algorithms.Config{Algorithm: "gcra", Limit: 100, Window: time.Second})
	b := mustRule(t, algorithms.Config{Algorithm: "token_bucket", Limit: 10, Window: time.Minute}).Bounded(100, "rl", "rl", "b")
	cr := mustRule(t, algorithms.Config{Algorithm: "fixed_window", Limit: 1000, Window: time.Hour})
	keys := make([]byte, 0, 256)
	body := make([]byte, 0, 1024)
	items := make([]redis.Item, 3)
	out := make([]redis.Answer, 3)
	answer := []byte(`{"EVALSHA":[1764480000,0,1,9007199254740991,1,100,99,0,10000000,0,1,10,9,0,6000000000,1,1,1000,999,0,3600000000000,0]}`)
	desc := []byte("203.0.113.7")
	if n := testing.AllocsPerRun(200, func() {
		keys = keys[:0]
		for i, r := range []*redis.Rule{a, b, cr} {
			start := len(keys)
			keys = redis.AppendKey(keys, "rl", "rl", "x", desc)
			items[i] = redis.Item{Rule: r, Key: keys[start:len(keys):len(keys)], N: 1}
		}
		body = redis.AppendEvalSHA(body[:0], redis.TestCallID, items)
		if _, committed, err := redis.ParseReplies(200, answer, redis.TestCallID, items, out); err != nil || !committed || !out[1].Overflow {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per call of three rules, want 0", n)
	}
}

func BenchmarkAppendEvalSHAParseReply(b *testing.B) {
	rule := mustRule(b, algorithms.Config{Algorithm: "token_bucket", Limit: 100, Window: time.Second, Burst: 50})
	buf := make([]byte, 0, 512)
	body := []byte(okBody)
	desc := []byte("203.0.113.7")
	b.ReportAllocs()
	for b.Loop() {
		key := redis.AppendKey(buf[:0], "rl", "rl", "api", desc)
		req := rule.AppendEvalSHA(key[len(key):], key, 1)
		r, err := redis.ParseReply(200, body)
		if err != nil || len(req) == 0 || r.Decision.Limit != 10 {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseReplies decodes a two-rule answer with ParseReplies and, for comparison, reads
// the same answer's tokens with a jsontext.Decoder, new or reused through Reset; the decoder
// reads the values only, without ParseReplies' checks against the request.
func BenchmarkParseReplies(b *testing.B) {
	fw := mustRule(b, algorithms.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Hour})
	gcra := mustRule(b, algorithms.Config{Algorithm: "gcra", Limit: 20, Window: time.Hour})
	items := []redis.Item{{Rule: fw, Key: []byte("a")}, {Rule: gcra, Key: []byte("b"), Shadow: true}}
	out := make([]redis.Answer, 2)
	body := []byte(`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,1]}`)
	b.Run("parser", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := redis.ParseReplies(200, body, redis.TestCallID, items, out); err != nil {
				b.Fatal(err)
			}
		}
	})
	var v [16]int64
	read := func(b *testing.B, d *jsontext.Decoder) {
		for range 3 { // {"EVALSHA":[
			if _, err := d.ReadToken(); err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; d.PeekKind() == '0'; i++ {
			tok, err := d.ReadToken()
			if err != nil {
				b.Fatal(err)
			}
			v[i], _ = tok.Int()
		}
	}
	b.Run("jsontext-new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			read(b, jsontext.NewDecoder(bytes.NewReader(body)))
		}
	})
	b.Run("jsontext-reset", func(b *testing.B) {
		r := bytes.NewReader(nil)
		d := jsontext.NewDecoder(r)
		b.ReportAllocs()
		for b.Loop() {
			r.Reset(body)
			d.Reset(r)
			read(b, d)
		}
	})
}

func BenchmarkAppendKeyLong(b *testing.B) {
	buf := make([]byte, 0, 512)
	desc := bytes.Repeat([]byte("x"), 300)
	b.ReportAllocs()
	for b.Loop() {
		buf = redis.AppendKey(buf[:0], "rl", "rl", "api", desc)
	}
}

// TestNewRuleFollowsSpecs checks that a global rule can be made for exactly the algorithms
// whose algorithms.Spec says they have a global mode, from a valid configuration, and that its
// arguments carry the one capacity rule (algorithms.Config.Capacity).
func TestNewRuleFollowsSpecs(t *testing.T) {
	for _, s := range algorithms.Specs() {
		c := algorithms.Config{Algorithm: s.Name, Limit: 10, Window: time.Second}
		if s.Accepts(algorithms.FieldBurst) {
			c.Burst = 4
		}
		if s.Accepts(algorithms.FieldAdaptive) {
			c.MinLimit, c.ErrorThreshold = 1, 0.5
		}
		if _, err := algorithms.New(c); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		r, err := redis.NewRule(c)
		if (err == nil) != s.Global {
			t.Fatalf("%s: NewRule error %v, but Spec.Global is %v", s.Name, err, s.Global)
		}
		if err != nil {
			continue
		}
		body := string(redis.AppendEvalSHA(nil, redis.TestCallID, []redis.Item{{Rule: r, Key: []byte("k"), N: 1}}))
		if want := fmt.Sprintf("/10/1000000000/%d/", c.Capacity()); !strings.Contains(body, want) {
			t.Fatalf("%s: the call %q does not carry limit, window and capacity %q", s.Name, body, want)
		}
	}
}
