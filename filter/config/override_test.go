package config

import (
	"strconv"
	"strings"
	"testing"
)

// OverrideFor compares the configured part of the key: exact values first, then the longest
// prefix, whatever the order in the configuration.
func TestOverrideFor(t *testing.T) {
	cfg, err := Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":10,"window":"1s",
		"key":[{"source":"header","name":"x-tenant"},{"source":"header","name":"x-user"}],
		"overrides":[{"part":1,"prefix":"a","limit":1},{"part":1,"prefix":"abc","limit":3},
		             {"part":1,"exact":"abcd","limit":4},{"prefix":"t","unlimited":true}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Rules[0]
	key := func(tenant, user string) []byte {
		return appendPart(appendPart(nil, tenant), user)
	}
	for _, c := range []struct {
		tenant, user string
		want         int64 // the override's limit; 0: unlimited; -1: none
	}{
		{"x", "b", -1},
		{"x", "a", 1},
		{"x", "abx", 1},
		{"x", "abcx", 3},
		{"x", "abcd", 4},
		{"t1", "abcd", 4}, // an exact value on part 1 wins over the prefix on part 0
		{"t1", "zzz", 0},
		{"x", "", -1},
	} {
		got := int64(-1)
		if i := r.OverrideFor(key(c.tenant, c.user)); i >= 0 {
			got = r.Overrides[i].Algorithm.Limit
			if r.Overrides[i].Unlimited {
				got = 0
			}
		}
		if got != c.want {
			t.Errorf("tenant %q user %q: override limit %d, want %d", c.tenant, c.user, got, c.want)
		}
	}
	// Keys that AppendKey never builds find no override and do not panic.
	for _, k := range []string{"", "x", "9", "99999999999999999999999:a", "1:", "1:a5:ab", ":", "1:a1"} {
		if i := r.OverrideFor([]byte(k)); i >= 0 {
			t.Errorf("malformed key %q found override %d", k, i)
		}
	}
}

// Finding an override is on every request of a rule that has them: no allocation.
func BenchmarkOverrideFor(b *testing.B) {
	cfg, err := Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":10,"window":"1s",
		"key":[{"source":"header","name":"x-api-key"}],
		"overrides":[{"exact":"internal","unlimited":true},{"prefix":"gold-","limit":100},{"prefix":"silver-","limit":50}]}]}`))
	if err != nil {
		b.Fatal(err)
	}
	r := cfg.Rules[0]
	key := appendPart(nil, "silver-12345678")
	b.ReportAllocs()
	for b.Loop() {
		if r.OverrideFor(key) < 0 {
			b.Fatal("no override")
		}
	}
}

// Overrides of different key parts with the same value get different tags: they are
// different overrides, not duplicates.
func TestOverrideTagsDifferByPart(t *testing.T) {
	cfg, err := Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":10,"window":"1s",
		"key":[{"source":"header","name":"x-a"},{"source":"header","name":"x-b"}],
		"overrides":[{"part":0,"exact":"x","limit":1},{"part":1,"exact":"x","limit":1000},
		             {"part":1,"prefix":"x","limit":5}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Rules[0].Overrides
	if o[0].Tag == o[1].Tag || o[1].Tag == o[2].Tag || o[0].Tag == o[2].Tag {
		t.Fatalf("overrides share a tag: %q %q %q", o[0].Tag, o[1].Tag, o[2].Tag)
	}
}

// The longest matching prefix wins wherever the exact overrides stand in the list: an exact
// override between two prefixes must not keep the shorter prefix, configured first, ahead of
// the longer one (a stable sort with a comparator that calls an exact override equal to every
// prefix did so), and with more overrides than an insertion-sort block (20) too.
func TestOverrideLongestPrefixAcrossExact(t *testing.T) {
	var many []string
	for i := range 30 {
		many = append(many, `{"exact":"e`+strconv.Itoa(i)+`","limit":9}`)
	}
	for _, list := range [][]string{
		{`{"prefix":"a","limit":1}`, `{"exact":"x","limit":9}`, `{"prefix":"abc","limit":3}`, `{"prefix":"ab","limit":2}`},
		{`{"prefix":"ab","limit":2}`, `{"exact":"x","limit":9}`, `{"prefix":"a","limit":1}`, `{"exact":"y","limit":9}`, `{"prefix":"abc","limit":3}`},
		append(append([]string{`{"prefix":"a","limit":1}`, `{"exact":"x","limit":9}`}, many...), `{"prefix":"ab","limit":2}`, `{"prefix":"abc","limit":3}`),
	} {
		cfg, err := Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":10,"window":"1s",
			"key":[{"source":"header","name":"x-user"}],"overrides":[` + strings.Join(list, ",") + `]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		r := cfg.Rules[0]
		for _, c := range []struct {
			user string
			want int64 // the override's limit; -1: none
		}{{"abcz", 3}, {"abz", 2}, {"az", 1}, {"x", 9}, {"z", -1}} {
			got := int64(-1)
			if i := r.OverrideFor(appendPart(nil, c.user)); i >= 0 {
				got = r.Overrides[i].Algorithm.Limit
			}
			if got != c.want {
				t.Errorf("%d overrides, user %q: limit %d, want %d", len(list), c.user, got, c.want)
			}
		}
	}
}

// An exact override on a client_ip part names clients as the part keys them: any spelling of
// an address, or the network the part masks it to, matches that client's requests; a value no
// key of the part can hold is refused rather than accepted and never matched.
func TestClientIPOverrides(t *testing.T) {
	const masked = `{"source":"client_ip","ipv4_prefix":24,"ipv6_prefix":64}`
	for _, c := range []struct {
		part, exact, source string
		err                 string // "" when accepted: then the source's requests match it
	}{
		{`{"source":"client_ip"}`, "192.0.2.1", "192.0.2.1:5555", ""},
		{`{"source":"client_ip"}`, "2001:DB8::1", "[2001:db8::1]:5555", ""},
		{`{"source":"client_ip"}`, "2001:db8:0:0:0:0:0:1", "[2001:db8::1]:5555", ""},
		{`{"source":"client_ip"}`, "::ffff:192.0.2.1", "192.0.2.1:5555", ""},
		{masked, "192.0.2.0/24", "192.0.2.77:5555", ""},
		{masked, "192.0.2.9/24", "192.0.2.77:5555", ""},
		{masked, "2001:DB8::/64", "[2001:db8::1]:5555", ""},
		{`{"source":"client_ip","ipv6_prefix":64}`, "192.0.2.1", "192.0.2.1:5555", ""},
		{`{"source":"client_ip","default":"unknown"}`, "unknown", "", ""},
		{masked, "192.0.2.1", "", `never matches: the part keys IPv4 clients by their /24 network: write "192.0.2.0/24"`},
		{`{"source":"client_ip","ipv6_prefix":64}`, "2001:db8::1", "", `never matches: the part keys IPv6 clients by their /64 network: write "2001:db8::/64"`},
		{masked, "192.0.0.0/16", "", `never matches: the part keys IPv4 clients by their /24 network: write "192.0.0.0/24"`},
		{`{"source":"client_ip"}`, "192.0.2.0/24", "", "never matches: the part keys whole IPv4 addresses (ipv4_prefix 24 on the part would key /24 networks)"},
		{`{"source":"client_ip","ipv4_prefix":32,"ipv6_prefix":128}`, "192.0.2.1/32", "192.0.2.1:5555", ""},
		{`{"source":"client_ip","ipv6_prefix":128}`, "2001:db8::1/128", "[2001:db8::1]:5555", ""},
		{`{"source":"client_ip"}`, "fe80::1%eth0", "[fe80::1%eth0]:5555", ""},
		{`{"source":"client_ip"}`, "internal", "", "never matches: a client_ip part's value is an IP address"},
		{`{"source":"client_ip","ipv6_prefix":120}`, "::ffff:192.0.2.0/120", "", "never matches: a client_ip part's value is an IP address"},
	} {
		cfg, err := Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":1,"window":"1h",
			"key":[` + c.part + `],"overrides":[{"exact":"` + c.exact + `","unlimited":true}]}]}`))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), "rules[0].overrides[0].exact: "+c.err) {
				t.Errorf("%s, exact %q: error %v, want %q", c.part, c.exact, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s, exact %q: %v", c.part, c.exact, err)
			continue
		}
		r := cfg.Rules[0]
		key, ok := r.AppendKey(nil, &fakeRequest{source: c.source})
		if !ok || r.OverrideFor(key) != 0 {
			t.Errorf("%s, exact %q: the requests of %s (key %q) do not match it", c.part, c.exact, c.source, key)
		}
	}
	// Two spellings of one client are one override, named twice.
	_, err := Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":1,"window":"1h",
		"key":[{"source":"client_ip"}],"overrides":[{"exact":"2001:db8::1","limit":5},{"exact":"2001:DB8::1","limit":9}]}]}`))
	if err == nil || !strings.Contains(err.Error(), "rules[0].overrides[1]: duplicate of rules[0].overrides[0]") {
		t.Errorf("two spellings of one address: %v", err)
	}
}
