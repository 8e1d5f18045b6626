package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzParse checks that Parse never panics, that every error it returns carries a message,
// and that the schema accepts whatever Parse accepts. Accepted configs are also exercised on
// the request path, which must not panic whatever the config holds.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/examples/*.json")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, tc := range invalidCases {
		if len(tc.config) < 4096 {
			f.Add([]byte(tc.config))
		}
	}
	f.Add([]byte(benchConfigJSON))
	requests := []*fakeRequest{
		req(),
		benchRequest(),
		req("x-cost: 5", "authorization: a", "x-tenant: t").with(func(r *fakeRequest) { r.path = "/login?q=%zz&key=1" }),
		{headers: map[string]string{}},
	}
	schema := compileSchema(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if c != nil {
				t.Fatalf("config returned with error")
			}
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T is not a non-empty Errors", err)
			}
			for _, e := range es {
				if e.Msg == "" {
					t.Fatalf("empty message at %q", e.Path)
				}
			}
			return
		}
		// Editors must never flag a config the filter accepts.
		if err := validate(schema, string(data)); err != nil {
			t.Fatalf("Parse accepts what the schema rejects: %v\n%s", err, data)
		}
		var dst []*Rule
		var key []byte
		for _, r := range requests {
			dst = c.Match(r, dst[:0])
			for _, rule := range dst {
				var ok bool
				key, ok = rule.AppendKey(key[:0], r)
				if !ok {
					t.Fatalf("rule %s matched but has no key", rule.Name)
				}
				if cost := rule.Cost(r); cost < 1 {
					t.Fatalf("cost %d", cost)
				}
				rule.Deny.AppendBody(nil, rule.Name, 3)
			}
		}
	})
}

// FuzzAppendKey feeds arbitrary header values, paths and addresses to a rule that uses
// every key source. Keys must always decode back to exactly the values they were built
// from, so no two distinct requests can share a key by accident.
func FuzzAppendKey(f *testing.F) {
	c, err := Parse([]byte(`{"trusted_hops":2,"rules":[{"name":"r","algorithm":"gcra","limit":100,"window":"1s",
		"cost":{"header":"x-cost","max":100},
		"key":[{"source":"header","name":"x-a"},{"source":"header","name":"x-b","default":"none"},
		       {"source":"client_ip","ipv4_prefix":24,"ipv6_prefix":48,"default":"noip"},
		       {"source":"query","name":"k","default":""},{"source":"path"},{"source":"method"},
		       {"source":"const","value":"c"}]}]}`))
	if err != nil {
		f.Fatal(err)
	}
	rule := c.Rules[0]
	f.Add("a,b", "", "1.2.3.4, 5.6.7.8", "/x?k=1", "1.2.3.4:5", "GET", "7")
	f.Add("1:a", "b", "garbage", "/?k=%ff%2", "[::1]:80", "POST", "-1")
	f.Add("\xff\xfe", "é", ",,,", "", "", "", "99999999999999999999")
	f.Fuzz(func(t *testing.T, a, b, xff, path, source, method, cost string) {
		r := &fakeRequest{headers: map[string]string{"x-a": a, "x-forwarded-for": xff, "x-cost": cost}, path: path, source: source, method: method}
		if b != "" {
			r.headers["x-b"] = b
		}
		key, ok := rule.AppendKey(nil, r)
		want := path != "" && pathOnly(path) != "" && method != ""
		if ok != want {
			t.Fatalf("ok = %v, want %v", ok, want)
		}
		if ok != (len(c.Match(r, nil)) == 1) {
			t.Fatalf("Match disagrees with AppendKey")
		}
		if got := rule.Cost(r); got < 1 || got > 100 {
			t.Fatalf("cost %d out of [1, 100]", got)
		}
		if !ok {
			return
		}
		parts, decoded := decodeKey(key)
		if !decoded || len(parts) != len(rule.Key) {
			t.Fatalf("key %q does not decode into %d parts: %q", key, len(rule.Key), parts)
		}
		wantB := b
		if b == "" {
			wantB = "none"
		}
		if parts[0] != a || parts[1] != wantB || parts[4] != pathOnly(path) || parts[5] != method || parts[6] != "c" {
			t.Fatalf("parts %q do not match the request", parts)
		}
		// The same request always gives the same key.
		again, _ := rule.AppendKey(nil, r)
		if !bytes.Equal(key, again) {
			t.Fatalf("key not deterministic")
		}
	})
}

// FuzzParseDuration compares the duration parser with time.ParseDuration wherever the two
// syntaxes overlap (no "d" unit; a bare number is an error here by design).
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1s", "1.5h", "-2m3s", "1d", "10", ".5us", "1µs", "9223372036854775807ns", "0.0000000001s", "1h1h1h",
		"0.333333333333333333334m", "18446744073.999999999s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := durationOf(s)
		if strings.Contains(s, "d") || isNumberLike(strings.TrimLeft(s, "+-")) {
			return
		}
		want, werr := time.ParseDuration(s)
		if (err == nil) != (werr == nil) {
			t.Fatalf("ParseDuration(%q) = %v, %v; time.ParseDuration = %v, %v", s, got, err, want, werr)
		}
		// Go's parser reads a fraction in floating point, this one in integers, and drops
		// digits past the 19th: the two may differ by a nanosecond.
		if err == nil && (got-want > 1 || want-got > 1) {
			t.Fatalf("ParseDuration(%q) = %v; time.ParseDuration = %v", s, got, want)
		}
	})
}

// FuzzParseFields puts fuzzed values into the fields of an otherwise valid rule, so that
// far more of the inputs reach validation and, when accepted, the schema and the
// request path (FuzzParse's random bytes are mostly not JSON).
func FuzzParseFields(f *testing.F) {
	f.Add("token_bucket", "1m", int64(100), int64(0), "/v1/.*", "x-tenant", int64(1), "client_ip", true)
	f.Add("sliding_window", "1500us", int64(2000), int64(5), "(", "X Bad", int64(0), "query", false)
	f.Add("adaptive", "1d", int64(0), int64(-1), "", ":authority", int64(7), "header", true)
	schema := compileSchema(f)
	f.Fuzz(func(t *testing.T, alg, window string, limit, burst int64, regex, header string, cost int64, source string, cont bool) {
		rule := map[string]any{"name": "r", "algorithm": alg, "window": window, "continue": cont,
			"match": map[string]any{"path": map[string]any{"regex": regex}, "headers": []any{map[string]any{"name": header, "present": true}}},
			"key":   []any{map[string]any{"source": source, "name": header, "default": "d"}},
		}
		if limit != 0 {
			rule["limit"] = limit
		}
		if burst != 0 {
			rule["burst"] = burst
		}
		if cost != 0 {
			rule["cost"] = cost
		}
		if alg == "adaptive" {
			rule["adaptive"] = map[string]any{"min_limit": 1, "max_limit": max(limit, 1), "target_latency": window}
		}
		data, err := json.Marshal(map[string]any{"rules": []any{rule}})
		if err != nil {
			t.Skip()
		}
		c, err := Parse(data)
		if err != nil {
			return
		}
		if err := validate(schema, string(data)); err != nil {
			t.Fatalf("Parse accepts what the schema rejects: %v\n%s", err, data)
		}
		r := req(header + ": v").with(func(r *fakeRequest) { r.path = regex })
		for _, rule := range c.Match(r, nil) {
			if _, ok := rule.AppendKey(nil, r); !ok {
				t.Fatalf("matched rule has no key")
			}
		}
	})
}
