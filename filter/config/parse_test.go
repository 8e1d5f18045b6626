package config

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/stretchr/testify/require"
)

func TestParseDefaults(t *testing.T) {
	c := mustParse(t, `{"rules":[{"name":"r","algorithm":"sliding_window","limit":10,"window":"1s"}]}`)
	if c.Domain != "rl" || c.FailureMode != FailAllow || c.CASAttempts != 8 ||
		c.RateLimitHeaders != HeadersDraft || c.TrustedHops != 0 || c.MaxKeys != 10000 || c.MaxKeyBytes != 1024 || c.Redis != nil {
		t.Errorf("top-level defaults: %+v", c)
	}
	d := c.Deny
	if d.Status != 429 || d.Body != defaultDenyBody || d.ContentType != "application/json" || len(d.Headers) != 0 {
		t.Errorf("deny defaults: %+v", d)
	}
	r := c.Rules[0]
	wantAlg := algorithms.Config{Algorithm: "sliding_window", Limit: 10, Window: time.Second, Variant: "counter"}
	if r.Algorithm != wantAlg {
		t.Errorf("algorithm config: %+v", r.Algorithm)
	}
	if _, ok := r.Limiter.(*algorithms.SlidingWindowCounter); !ok {
		t.Errorf("limiter is %T", r.Limiter)
	}
	if r.Index != 0 || r.Name != "r" || r.Mode != ModeMeter ||
		r.CostSpec != (CostSpec{Constant: 1}) || r.Shadow || r.Continue || r.Scope != ScopeLocal ||
		r.MaxKeys != 10000 || r.Deny != c.Deny || r.RateLimitHeaders != HeadersDraft || len(r.Key) != 0 {
		t.Errorf("rule defaults: %+v", r)
	}
	if !r.Match.matches(req()) {
		t.Errorf("a rule without match must match every request")
	}
}

func TestParseEverything(t *testing.T) {
	data, err := os.ReadFile("testdata/examples/everything.json")
	if err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, string(data))
	if c.Domain != "full.example" || c.FailureMode != FailDeny || c.CASAttempts != 4 ||
		c.RateLimitHeaders != HeadersLegacy || c.TrustedHops != 1 || c.MaxKeys != 20000 || c.MaxKeyBytes != 4096 {
		t.Errorf("top level: %+v", c)
	}
	if c.Deny.ContentType != "application/problem+json" || len(c.Deny.Headers) != 1 ||
		c.Deny.Headers[0] != (Header{Name: "cache-control", Value: "no-store"}) {
		t.Errorf("deny: %+v", c.Deny)
	}
	want := Redis{Cluster: "webdis", Authority: "webdis", Timeout: 50 * time.Millisecond, KeyPrefix: "rl", Partitions: 1,
		FailureMode: RedisFailLocal, Breaker: Breaker{Failures: 5, Cooldown: 5 * time.Second}}
	if *c.Redis != want {
		t.Errorf("redis: %+v", *c.Redis)
	}
	up := c.Rules[0]
	if up.CostSpec != (CostSpec{Constant: 1, Header: "x-upload-cost", Default: 10, Max: 100}) {
		t.Errorf("cost: %+v", up.CostSpec)
	}
	if up.Scope != ScopeGlobal || up.MaxKeys != 5000 || up.RateLimitHeaders != HeadersDraft || !up.Continue || up.Algorithm.Burst != 200 {
		t.Errorf("uploads: %+v", up)
	}
	if len(up.Match.Headers) != 3 || up.Match.Headers[1].Kind != MatchAbsent || !up.Match.Headers[2].Invert {
		t.Errorf("headers: %+v", up.Match.Headers)
	}
	if up.Key[3] != (KeyPart{Source: SourceHeader, Name: "authorization", Default: "anonymous", HasDefault: true, IPv4Prefix: 32, IPv6Prefix: 128, OnDuplicate: DuplicateReject}) {
		t.Errorf("key: %+v", up.Key[3])
	}
	rest := c.Rules[1]
	if rest.Algorithm.Window != 90*time.Second || rest.CostSpec.Constant != 2 || rest.MaxKeys != 20000 || rest.RateLimitHeaders != HeadersLegacy {
		t.Errorf("everything-else: %+v", rest)
	}
	// The rule's deny overrides only the headers (to none); the rest is inherited.
	if rest.Deny.Status != 429 || rest.Deny.Body != c.Deny.Body || rest.Deny.ContentType != c.Deny.ContentType || len(rest.Deny.Headers) != 0 {
		t.Errorf("rule deny: %+v", rest.Deny)
	}
}

func TestRedisAuthorityDefault(t *testing.T) {
	c := mustParse(t, `{"redis":{"cluster":"outbound|7379||webdis/x"},"rules":[{"name":"r",`+tb+`,"scope":"global"}]}`)
	if c.Redis.Authority != c.Redis.Cluster {
		t.Errorf("authority = %q", c.Redis.Authority)
	}
	for _, a := range []string{"webdis.local:7379", "webdis.local", "[::1]:7379", "[::1]", "h:65535"} {
		c = mustParse(t, `{"redis":{"cluster":"webdis","authority":"`+a+`"},"rules":[{"name":"r",`+tb+`}]}`)
		if c.Redis.Authority != a {
			t.Errorf("authority = %q, want %q", c.Redis.Authority, a)
		}
	}
}

// TestKeyPrefixCharacters: key_prefix takes every character of its pattern, braces in any
// place but an empty hash tag at the first '{' (TestInvalid has those), and keeps it as written.
func TestKeyPrefixCharacters(t *testing.T) {
	for _, prefix := range []string{"rl", "{app}", "{rl}:v2", "a{b}{}", "x{", "{", "}", "}{x}", "a{b{}c}", "a:b.c-d_e", "AZaz09_.:-}{z}"} {
		c := mustParse(t, `{"redis":{"cluster":"webdis","key_prefix":"`+prefix+`"},"rules":[{"name":"r",`+tb+`,"scope":"global"}]}`)
		if c.Redis.KeyPrefix != prefix {
			t.Errorf("key_prefix %q parsed as %q", prefix, c.Redis.KeyPrefix)
		}
	}
}

func TestParseAdaptiveAndShaping(t *testing.T) {
	c := mustParse(t, oneRule(`"algorithm":"adaptive","window":"1s","adaptive":{"min_limit":5,"max_limit":50,"target_latency":"100ms"}`))
	want := algorithms.Config{Algorithm: "adaptive", Limit: 50, Window: time.Second, MinLimit: 5, MaxLimit: 50,
		TargetLatency: 100 * time.Millisecond, ErrorThreshold: 0.05, AdjustInterval: time.Second}
	if r := c.Rules[0]; r.Algorithm != want {
		t.Errorf("adaptive: %+v", r.Algorithm)
	}
	if _, ok := c.Rules[0].Limiter.(*algorithms.Adaptive); !ok {
		t.Errorf("limiter is %T", c.Rules[0].Limiter)
	}
	c = mustParse(t, oneRule(`"algorithm":"adaptive","window":"1s","limit":7,"adaptive":{"min_limit":5,"max_limit":50,"error_threshold":0.5,"interval":"2s"}`))
	if a := c.Rules[0].Algorithm; a.Limit != 7 || a.TargetLatency != 0 || a.ErrorThreshold != 0.5 || a.AdjustInterval != 2*time.Second {
		t.Errorf("adaptive with a start limit: %+v", a)
	}
	c = mustParse(t, oneRule(`"algorithm":"leaky_bucket","limit":5,"window":"1s","mode":"shape","max_delay":"1.5s"`))
	if r := c.Rules[0]; r.Mode != ModeShape || r.Algorithm.MaxDelay != 1500*time.Millisecond {
		t.Errorf("shaping: %+v", r)
	}
	c = mustParse(t, oneRule(`"algorithm":"leaky_bucket","limit":5,"window":"1s"`))
	if r := c.Rules[0]; r.Mode != ModeMeter || r.Algorithm.MaxDelay != 0 {
		t.Errorf("metering: %+v", r)
	}
}

func TestDenyInheritance(t *testing.T) {
	c := mustParse(t, `{
		"deny": {"status": 503, "body": "slow down", "headers": {"X-A": "1"}},
		"rules": [
			{"name": "inherit", `+tb+`},
			{"name": "body", `+tb+`, "deny": {"body": "{\"x\":1}", "content_type": "application/json"}},
			{"name": "status", `+tb+`, "deny": {"status": 429}},
			{"name": "plain", `+tb+`, "deny": {"body": "other"}}
		]}`)
	top := c.Deny
	if top.Status != 503 || top.Body != "slow down" || top.ContentType != "text/plain" || top.Headers[0].Name != "x-a" {
		t.Errorf("top: %+v", top)
	}
	if c.Rules[0].Deny != top {
		t.Errorf("a rule without deny must share the top-level response")
	}
	if d := c.Rules[1].Deny; d.Status != 503 || d.ContentType != "application/json" || d.Body != `{"x":1}` || len(d.Headers) != 1 {
		t.Errorf("body override: %+v", d)
	}
	if d := c.Rules[2].Deny; d.Status != 429 || d.Body != "slow down" || d.ContentType != "text/plain" {
		t.Errorf("status override: %+v", d)
	}
	if d := c.Rules[3].Deny; d.ContentType != "text/plain" || d.Body != "other" {
		t.Errorf("plain override: %+v", d)
	}
	if v, ok := top.headerValue("X-A"); !ok || v != "1" {
		t.Errorf("headerValue = %q, %v", v, ok)
	}
	// The default content type follows the default body only.
	c = mustParse(t, `{"deny":{"body":"{}"},"rules":[{"name":"r",`+tb+`}]}`)
	if c.Deny.ContentType != "text/plain" {
		t.Errorf("content type of a custom body = %q", c.Deny.ContentType)
	}
}

func TestAppendBody(t *testing.T) {
	d := defaultDeny()
	got := string(d.AppendBody(nil, "api.v1", 17))
	if got != `{"error":"rate_limited","rule":"api.v1","retry_after":17}` {
		t.Errorf("default body = %s", got)
	}
	if !json.Valid([]byte(got)) {
		t.Errorf("default body is not JSON")
	}
	c := mustParse(t, `{"deny":{"body":"100% sure: %RULE% %RULE% in %RETRY_AFTER%s %NOT-A-PLACEHOLDER% %"},"rules":[{"name":"r",`+tb+`}]}`)
	if got := string(c.Deny.AppendBody([]byte("> "), "r", -5)); got != "> 100% sure: r r in 0s %NOT-A-PLACEHOLDER% %" {
		t.Errorf("custom body = %q", got)
	}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = d.AppendBody(buf[:0], "rule", 1234) }); n != 0 {
		t.Errorf("AppendBody allocates %v times", n)
	}
}

func TestDurations(t *testing.T) {
	ok := []struct {
		in   string
		want time.Duration
	}{
		{"1ns", 1},
		{"1us", time.Microsecond},
		{"1µs", time.Microsecond},
		{"1μs", time.Microsecond},
		{"250ms", 250 * time.Millisecond},
		{"1s", time.Second},
		{"1.5s", 1500 * time.Millisecond},
		{".5s", 500 * time.Millisecond},
		{"1m", time.Minute},
		{"1m30s", 90 * time.Second},
		{"1h", time.Hour},
		{"24h", 24 * time.Hour},
		{"1d", 24 * time.Hour},
		{"1d12h", 36 * time.Hour},
		{"1.5d", 36 * time.Hour},
		{"7d", 7 * 24 * time.Hour},
		{"+5s", 5 * time.Second},
		{"-5s", -5 * time.Second},
		{"0s", 0},
		{"2562047h", 2562047 * time.Hour},
		{"1.0000000000000000000001s", time.Second},
		{"0.000000001s", 1},
		{"1.999999999999s", 1999999999},
		{"2.5h30.5m", 2*time.Hour + 60*time.Minute + 30*time.Second},
		{"5.s", 5 * time.Second},
		{"106751d23h47m16.854775807s", 1<<63 - 1},
		{"9223372036.854775807999s", 1<<63 - 1},
	}
	for _, tc := range ok {
		got, err := durationOf(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		// Where Go's parser knows the syntax, both must agree exactly.
		if !strings.Contains(tc.in, "d") {
			if g, err := time.ParseDuration(tc.in); err != nil || g != got {
				t.Errorf("time.ParseDuration(%q) = %v, %v; ours %v", tc.in, g, err, got)
			}
		}
	}
	bad := []struct{ in, msg string }{
		{"", `"" is not a duration (want e.g. "500ms", "1m30s", "1d")`},
		{"10", `"10" has no unit`},
		{"1.5", `"1.5" has no unit`},
		{"-10", `"-10" has no unit`},
		{".", `"." is not a duration (want e.g. "500ms", "1m30s", "1d")`},
		{"s", `"s" is not a duration (want e.g. "500ms", "1m30s", "1d")`},
		{"1x", `"1x" has unknown unit "x" (want ns, us, ms, s, m, h or d)`},
		{"1 s", `"1 s" has unknown unit " s" (want ns, us, ms, s, m, h or d)`},
		{"1S", `"1S" has unknown unit "S" (want ns, us, ms, s, m, h or d)`},
		{"1h30", `"1h30" ends in a number with no unit`},
		{"1..5s", `"1..5s" has a number with two decimal points`},
		{"2562048h", `"2562048h" is too large`},
		{"106752d", `"106752d" is too large`},
		{"9223372036854775808ns", `"9223372036854775808ns" is too large`},
		{"99999999999999999999s", `"99999999999999999999s" is too large`},
		{"2562047h2562047h", `"2562047h2562047h" is too large`},
		{"106751d23h47m16.854775808s", `"106751d23h47m16.854775808s" is too large`},
		{"18446744073709551616ns", `"18446744073709551616ns" is too large`},
		{"1.2.3s", `"1.2.3s" has a number with two decimal points`},
		{"18446744073.999999999s", `"18446744073.999999999s" is too large`},
		{"18446744073709551.999us", `"18446744073709551.999us" is too large`},
		{"9223372036.854775808s", `"9223372036.854775808s" is too large`},
		{"1s.", `"1s." is not a duration (want e.g. "500ms", "1m30s", "1d")`},
	}
	for _, tc := range bad {
		_, err := durationOf(tc.in)
		if err == nil || err.Error() != tc.msg {
			t.Errorf("parseDuration(%q) error = %v; want %s", tc.in, err, tc.msg)
		}
	}
}

// headerValue returns the configured value of a denial header (name in lower case).
func (d *Deny) headerValue(name string) (string, bool) {
	for _, h := range d.Headers {
		if h.Name == strings.ToLower(name) {
			return h.Value, true
		}
	}
	return "", false
}

// TestEnforcePercentAndNearLimitRatio checks the rules' effective enforce_percent and
// near_limit_ratio: the top level's when a rule has none, 100 for a shadow rule whatever the
// top level says, and the share in parts per million rounded to the nearest.
func TestEnforcePercentAndNearLimitRatio(t *testing.T) {
	c := mustParse(t, `{"enforce_percent":25,"near_limit_ratio":0.5,"rules":[
		{"name":"inherits","continue":true,`+tb+`},
		{"name":"own","continue":true,"enforce_percent":12.34567,"near_limit_ratio":0.9,`+tb+`},
		{"name":"dry","continue":true,"shadow":true,`+tb+`},
		{"name":"tells","enforce_percent":0,"shadow_request_header":"x-unenforced",`+tb+`}]}`)
	type want struct {
		percent float64
		ppm     uint32
		ratio   float64
	}
	for i, w := range []want{{25, 250_000, 0.5}, {12.34567, 123_457, 0.9}, {100, EnforceAll, 0.5}, {0, 0, 0.5}} {
		r := c.Rules[i]
		require.Equal(t, w.percent, r.EnforcePercent, r.Name)
		require.Equal(t, w.ppm, r.EnforcePPM, r.Name)
		require.Equal(t, w.ratio, r.NearLimitRatio, r.Name)
	}
	require.Equal(t, "x-unenforced", c.Rules[3].ShadowRequestHeader)

}

// TestFilterState checks the top-level filter_state switch: off by default, on when set, and
// refused when not a boolean.
func TestFilterState(t *testing.T) {
	require.False(t, mustParse(t, oneRule(tb)).FilterState)
	c := mustParse(t, `{"filter_state":true,"rules":[{"name":"r",`+tb+`}]}`)
	require.True(t, c.FilterState)
	_, err := Parse([]byte(`{"filter_state":"yes","rules":[{"name":"r",` + tb + `}]}`))
	require.ErrorContains(t, err, `filter_state: want true or false, got "yes"`)
}

// Parse calls a config empty exactly when bytes.TrimSpace leaves nothing of it, also for
// Unicode white space (which the check for a printable ASCII byte does not settle), and
// hasPrintableASCII finds a printable byte wherever it is.
func TestEmptyConfigAsTrimSpace(t *testing.T) {
	for _, s := range []string{"", " \n", "\v\f\r\t", "\u00a0", "\u0085 \u2028", "\u3000\n"} {
		_, err := Parse([]byte(s))
		require.EqualError(t, err, "config is empty: at least one rule is required", "%q", s)
	}
	for _, s := range []string{"\u00a0x", "\x7f", "\u00e9", "\x00"} {
		_, err := Parse([]byte(s))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "config is empty", "%q", s)
	}
	require.False(t, hasPrintableASCII([]byte(" \t\n\x7f\u00a0")))
	require.True(t, hasPrintableASCII([]byte("   \n}")))
	require.True(t, hasPrintableASCII([]byte("{")))
}

// SameRuleName compares names as the strings.Map that turns '.' and '-' into '_' would, for every
// pair of names a rule may have (see isName).
func TestSameRuleName(t *testing.T) {
	mapped := func(s string) string {
		return strings.Map(func(c rune) rune {
			if c == '.' || c == '-' {
				return '_'
			}
			return c
		}, s)
	}
	names := []string{"a", "b", "a.b-c_d", "a_b_c_d", "a-b.c.d", "a.b-c_e", "...", "---", "___", "..",
		"A-9.z", "A_9_z", "a-9.z", strings.Repeat("x.-", 21), strings.Repeat("x__", 21)}
	for _, a := range names {
		if !isName(a) {
			t.Fatalf("%q is no name", a)
		}
		for _, b := range names {
			if got, want := SameRuleName(a, b), mapped(a) == mapped(b); got != want {
				t.Errorf("SameRuleName(%q, %q) = %v, want %v", a, b, got, want)
			}
		}
	}
}
