package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func key(t *testing.T, c *Config, r *fakeRequest) (string, bool) {
	t.Helper()
	k, ok := c.Rules[0].AppendKey([]byte("prefix|"), r)
	if !strings.HasPrefix(string(k), "prefix|") {
		t.Fatalf("AppendKey clobbered dst: %q", k)
	}
	_, dup := c.Rules[0].DuplicatePart(r)
	if _, avail := c.Rules[0].walkKey(nil, r, walkAvailable); !dup && ok != avail {
		t.Errorf("AppendKey ok=%v but the walk for availability says %v", ok, !ok)
	}
	if _, slow := c.Rules[0].duplicatePart(r); c.Rules[0].RepeatsKeyPart(r) != slow {
		t.Errorf("RepeatsKeyPart = %v but duplicatePart found %v", !slow, slow)
	}
	if !ok && string(k) != "prefix|" {
		t.Errorf("AppendKey failed but left %q", k)
	}
	return strings.TrimPrefix(string(k), "prefix|"), ok
}

func TestAppendKey(t *testing.T) {
	cases := []struct {
		name   string
		key    string
		req    *fakeRequest
		want   string
		wantOK bool
	}{
		{"no parts", `[]`, req(), "", true},
		{"const", `[{"source":"const","value":"v1"}]`, req(), "2:v1", true},
		{"const empty", `[{"source":"const","value":""}]`, req(), "0:", true},
		{"client ip", `[{"source":"client_ip"}]`, req(), "9:192.0.2.1", true},
		{"client ip v4 prefix", `[{"source":"client_ip","ipv4_prefix":24}]`, req(), "12:192.0.2.0/24", true},
		{"client ip v6 prefix", `[{"source":"client_ip","ipv4_prefix":24,"ipv6_prefix":64}]`,
			req().with(func(r *fakeRequest) { r.source = "[2001:db8:1:2:3:4:5:6]:443" }), "17:2001:db8:1:2::/64", true},
		{"client ip v6 full", `[{"source":"client_ip","ipv4_prefix":24}]`,
			req().with(func(r *fakeRequest) { r.source = "[2001:db8::1]:443" }), "11:2001:db8::1", true},
		{"client ip mapped v4 uses v4 prefix", `[{"source":"client_ip","ipv4_prefix":16}]`,
			req().with(func(r *fakeRequest) { r.source = "[::ffff:198.51.100.7]:1" }), "13:198.51.0.0/16", true},
		{"client ip missing", `[{"source":"client_ip"}]`, req().with(func(r *fakeRequest) { r.source = "" }), "", false},
		{"client ip default", `[{"source":"client_ip","default":"none"}]`, req().with(func(r *fakeRequest) { r.source = "pipe" }), "4:none", true},
		{"header", `[{"source":"header","name":"X-Api-Key"}]`, req("x-api-key: k1"), "2:k1", true},
		{"header empty value is a value", `[{"source":"header","name":"x-api-key"}]`, req("x-api-key:"), "0:", true},
		{"header missing", `[{"source":"header","name":"x-api-key"}]`, req(), "", false},
		{"header default", `[{"source":"header","name":"x-api-key","default":"anon"}]`, req(), "4:anon", true},
		// A repeated key header is ambiguous: no key under the default (the filter refuses the
		// request with 400 first), even with a default; first or last when the part says so.
		{"header repeated", `[{"source":"header","name":"x-a"}]`, req("x-a: 1", "x-a: 2"), "", false},
		{"header repeated with default", `[{"source":"header","name":"x-a","default":"d"}]`, req("x-a: 1", "x-a: 2"), "", false},
		{"header repeated first", `[{"source":"header","name":"x-a","on_duplicate":"first"}]`, req("x-a: 1", "x-a: 2", "x-a: 3"), "1:1", true},
		{"header repeated last", `[{"source":"header","name":"x-a","on_duplicate":"last"}]`, req("x-a: 1", "x-a: 2", "x-a: 3"), "1:3", true},
		{"header once, first", `[{"source":"header","name":"x-a","on_duplicate":"first"}]`, req("x-a: 1,2"), "3:1,2", true},
		{"query", `[{"source":"query","name":"key"}]`, req().with(func(r *fakeRequest) { r.path = "/x?a=1&key=abc" }), "3:abc", true},
		// A repeated parameter is ambiguous like a repeated header: no key under "reject"
		// (the default; the filter answers 400), the chosen one under "first" or "last".
		{"query repeated", `[{"source":"query","name":"key"}]`, req().with(func(r *fakeRequest) { r.path = "/x?a=1&key=abc&key=def" }), "", false},
		{"query repeated encoded", `[{"source":"query","name":"key","default":"-"}]`, req().with(func(r *fakeRequest) { r.path = "/x?key=abc&%6Bey=def" }), "", false},
		{"query repeated first", `[{"source":"query","name":"key","on_duplicate":"first"}]`, req().with(func(r *fakeRequest) { r.path = "/x?key=abc&key=def" }), "3:abc", true},
		{"query repeated last", `[{"source":"query","name":"key","on_duplicate":"last"}]`, req().with(func(r *fakeRequest) { r.path = "/x?key=abc&b=1&key=def" }), "3:def", true},
		{"query decoded", `[{"source":"query","name":"api key"}]`, req().with(func(r *fakeRequest) { r.path = "/x?api%20key=%61b+c%2" }), "6:ab c%2", true},
		{"query name decoded with +", `[{"source":"query","name":"api key"}]`, req().with(func(r *fakeRequest) { r.path = "/x?api+key=1" }), "1:1", true},
		{"query without value", `[{"source":"query","name":"flag"}]`, req().with(func(r *fakeRequest) { r.path = "/x?flag&b=2" }), "0:", true},
		{"query missing", `[{"source":"query","name":"key"}]`, req().with(func(r *fakeRequest) { r.path = "/x?keys=1&k=2" }), "", false},
		{"query no query string", `[{"source":"query","name":"key"}]`, req().with(func(r *fakeRequest) { r.path = "/x" }), "", false},
		{"query not in fragment", `[{"source":"query","name":"key"}]`, req().with(func(r *fakeRequest) { r.path = "/x?a=1#key=2" }), "", false},
		{"query default", `[{"source":"query","name":"key","default":"-"}]`, req().with(func(r *fakeRequest) { r.path = "/x" }), "1:-", true},
		{"path without query", `[{"source":"path"}]`, req().with(func(r *fakeRequest) { r.path = "/a/b?c=d" }), "4:/a/b", true},
		{"path missing", `[{"source":"path"}]`, req().with(func(r *fakeRequest) { r.path = "" }), "", false},
		{"method", `[{"source":"method"}]`, req(), "3:GET", true},
		{"method missing", `[{"source":"method"}]`, req().with(func(r *fakeRequest) { r.method = "" }), "", false},
		{"route", `[{"source":"route"}]`, req(), "3:api", true},
		{"route missing with default", `[{"source":"route","default":"none"}]`, req().with(func(r *fakeRequest) { r.route = "" }), "4:none", true},
		{"several parts", `[{"source":"const","value":"t"},{"source":"header","name":"x-tenant"},{"source":"method"}]`, req("x-tenant: acme"), "1:t4:acme3:GET", true},
		{"second part missing skips", `[{"source":"method"},{"source":"header","name":"x-tenant"}]`, req(), "", false},
		{"unicode and invalid UTF-8 kept as bytes", `[{"source":"header","name":"x-a"}]`, req("x-a: é\xff"), "3:é\xff", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, oneRule(tb+`,"key":`+tc.key))
			got, ok := key(t, c, tc.req)
			if ok != tc.wantOK || got != tc.want {
				t.Errorf("AppendKey = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestAppendKeyUnambiguous(t *testing.T) {
	two := mustParse(t, oneRule(tb+`,"key":[{"source":"header","name":"a"},{"source":"header","name":"b","default":""}]`))
	pairs := [][2]*fakeRequest{
		{req("a: a,b"), req("a: a", "b: b")},         // "a,b" + "" vs "a" + "b"
		{req("a: 1:b"), req("a: 1", "b: b")},         // a value that looks like a length prefix
		{req("a: x1:y"), req("a: x", "b: y")},        // another split
		{req("a: "), req("a: 0:")},                   // empty against a fake encoding of empty
		{req("a: ab", "b: c"), req("a: a", "b: bc")}, // plain concatenation would collide
	}
	for _, p := range pairs {
		k1, ok1 := two.Rules[0].AppendKey(nil, p[0])
		k2, ok2 := two.Rules[0].AppendKey(nil, p[1])
		if !ok1 || !ok2 {
			t.Fatalf("keys not built: %v %v", ok1, ok2)
		}
		if string(k1) == string(k2) {
			t.Errorf("different parts gave the same key %q", k1)
		}
	}
	// A long value is kept whole: truncating would merge clients that differ at the end.
	long := strings.Repeat("x", 10000)
	one := mustParse(t, oneRule(tb+`,"key":[{"source":"header","name":"a"}]`))
	k1, _ := one.Rules[0].AppendKey(nil, req("a: "+long+"1"))
	k2, _ := one.Rules[0].AppendKey(nil, req("a: "+long+"2"))
	if string(k1) == string(k2) || len(k1) != len("10001:")+10001 {
		t.Errorf("long values: len %d, equal %v", len(k1), string(k1) == string(k2))
	}
}

// decodeKey splits an AppendKey encoding back into its parts, or fails. It is the proof of
// unambiguity the fuzz test leans on: every key decodes to exactly the parts it came from.
func decodeKey(k []byte) ([]string, bool) {
	var parts []string
	for len(k) > 0 {
		i := 0
		n := 0
		for i < len(k) && k[i] >= '0' && k[i] <= '9' {
			n = n*10 + int(k[i]-'0')
			i++
			if n > len(k) {
				return nil, false
			}
		}
		if i == 0 || i >= len(k) || k[i] != ':' || i+1+n > len(k) {
			return nil, false
		}
		parts = append(parts, string(k[i+1:i+1+n]))
		k = k[i+1+n:]
	}
	return parts, true
}

func TestClientIP(t *testing.T) {
	const src = "192.0.2.1:1234"
	cases := []struct {
		name string
		hops int
		xff  []string // header lines; nil: no header
		src  string
		want string // "" = not found
	}{
		{"hops 0 uses source", 0, []string{"203.0.113.9"}, src, "192.0.2.1"},
		{"hops 0 ignores xff", 0, []string{"203.0.113.9, 198.51.100.1"}, src, "192.0.2.1"},
		{"hops 1 right-most", 1, []string{"203.0.113.9, 198.51.100.1"}, src, "198.51.100.1"},
		{"hops 2", 2, []string{"203.0.113.9, 198.51.100.1"}, src, "203.0.113.9"},
		{"hops 2 ignores spoofed left entries", 2, []string{"6.6.6.6, 7.7.7.7, 203.0.113.9, 198.51.100.1"}, src, "203.0.113.9"},
		{"hops 2 over header lines", 2, []string{"6.6.6.6, 203.0.113.9", "198.51.100.1"}, src, "203.0.113.9"},
		{"too few entries fall back", 3, []string{"203.0.113.9, 198.51.100.1"}, src, "192.0.2.1"},
		{"no header falls back", 1, nil, src, "192.0.2.1"},
		{"empty header falls back", 1, []string{""}, src, "192.0.2.1"},
		{"garbage entry falls back", 1, []string{"1.2.3.4, not-an-ip"}, src, "192.0.2.1"},
		{"empty entry falls back (it counts)", 2, []string{"1.2.3.4,,5.6.7.8"}, src, "192.0.2.1"},
		{"garbage does not shift to the left", 2, []string{"1.2.3.4, garbage, 5.6.7.8"}, src, "192.0.2.1"},
		{"whitespace trimmed", 1, []string{"1.2.3.4 ,\t 5.6.7.8 \t"}, src, "5.6.7.8"},
		{"ipv6", 1, []string{"2001:db8::1"}, src, "2001:db8::1"},
		{"ipv6 bracketed", 1, []string{"[2001:db8::1]"}, src, "2001:db8::1"},
		{"ipv6 with port", 1, []string{"[2001:db8::1]:8080"}, src, "2001:db8::1"},
		{"ipv4 with port", 1, []string{"1.2.3.4:8080"}, src, "1.2.3.4"},
		{"ipv4-mapped", 1, []string{"::ffff:1.2.3.4"}, src, "1.2.3.4"},
		{"zone dropped", 1, []string{"fe80::1%eth0"}, src, "fe80::1"},
		{"upper-case ipv6 normalised", 1, []string{"2001:DB8:0:0::1"}, src, "2001:db8::1"},
		{"source ipv6", 0, nil, "[2001:db8::2]:443", "2001:db8::2"},
		{"source mapped", 0, nil, "[::ffff:192.0.2.7]:443", "192.0.2.7"},
		{"source without port", 0, nil, "192.0.2.8", "192.0.2.8"},
		{"source pipe", 0, nil, "/var/run/envoy.sock", ""},
		{"source empty", 0, nil, "", ""},
		{"source garbage with xff garbage", 1, []string{"x"}, "y", ""},
		{"leading zeros rejected", 1, []string{"001.2.3.4"}, src, "192.0.2.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := req().with(func(r *fakeRequest) { r.source = tc.src })
			for _, line := range tc.xff {
				if prev, ok := r.headers["x-forwarded-for"]; ok {
					line = prev + "," + line
				}
				r.headers["x-forwarded-for"] = line
			}
			ip, ok := ClientIP(r, tc.hops)
			if tc.want == "" {
				if ok {
					t.Errorf("ClientIP = %v, want none", ip)
				}
				return
			}
			if !ok || ip.String() != netip.MustParseAddr(tc.want).String() {
				t.Errorf("ClientIP = %v, %v; want %s", ip, ok, tc.want)
			}
		})
	}
}

func TestCost(t *testing.T) {
	c := mustParse(t, oneRule(tb+`,"cost":3`))
	if got := c.Rules[0].Cost(req("x-cost: 1")); got != 3 {
		t.Errorf("constant cost = %d", got)
	}
	c = mustParse(t, oneRule(`"algorithm":"token_bucket","limit":50,"window":"1s","cost":{"header":"X-Cost","default":2,"max":50}`))
	r := c.Rules[0]
	cases := []struct {
		header string // "" = absent
		want   int64
	}{
		{"", 2},
		{"x-cost: 1", 1},
		{"x-cost: 7", 7},
		{"x-cost:  7\t", 7},
		{"x-cost: 007", 7},
		{"x-cost: 50", 50},
		{"x-cost: 51", 50},
		{"x-cost: 0", 50},
		{"x-cost: -1", 50},
		{"x-cost: +5", 50},
		{"x-cost: 1.5", 50},
		{"x-cost: 5e1", 50},
		{"x-cost: abc", 50},
		{"x-cost: 0x10", 50},
		{"x-cost:", 50},
		{"x-cost: 99999999999999999999999999", 50},
		{"x-cost: 1 2", 50},
		{"x-cost: ５", 50}, // a full-width digit is not a decimal digit
	}
	for _, tc := range cases {
		rq := req()
		if tc.header != "" {
			rq = req(tc.header)
		}
		if got := r.Cost(rq); got != tc.want {
			t.Errorf("Cost(%q) = %d, want %d", tc.header, got, tc.want)
		}
	}
	// Two header lines are one joined value, which is not a number: charged max.
	if got := r.Cost(req("x-cost: 1", "x-cost: 1")); got != 50 {
		t.Errorf("Cost(two lines) = %d", got)
	}
	// The filter's Header answers the first of several lines (Envoy's single-value lookup):
	// the lines HeaderLines counts make them several values all the same, charged max, in
	// either order.
	for _, lines := range [][]string{{"1", "50"}, {"50", "1"}, {"1", "1"}} {
		rq := req("x-cost: "+lines[0], "x-cost: "+lines[1])
		rq.headers["x-cost"] = lines[0]
		if got := r.Cost(rq); got != 50 {
			t.Errorf("Cost(lines %q, Header answering the first) = %d, want 50", lines, got)
		}
	}
	c = mustParse(t, oneRule(tb+`,"cost":{"header":"x-cost","max":5}`))
	if got := c.Rules[0].Cost(req()); got != 1 {
		t.Errorf("default default = %d", got)
	}
}

// cachingRequest is a fakeRequest that keeps the client IP, as the filter's request does, and
// counts how often the source address is read.
type cachingRequest struct {
	*fakeRequest
	cache ClientIPCache
	reads int
}

func (r *cachingRequest) ClientIPCache() *ClientIPCache { return &r.cache }
func (r *cachingRequest) SourceAddress() string {
	r.reads++
	return r.fakeRequest.SourceAddress()
}

// A request with a cache gives the same keys as one without, and reads the address once.
func TestClientIPCache(t *testing.T) {
	c := mustParse(t, `{"rules":[
		{"name":"a","continue":true,"key":[{"source":"client_ip"}],`+tb+`},
		{"name":"b","continue":true,"key":[{"source":"client_ip","ipv4_prefix":24,"ipv6_prefix":48}],`+tb+`},
		{"name":"c","key":[{"source":"header","name":"x-t"},{"source":"client_ip"}],`+tb+`}]}`)
	for _, src := range []string{"192.0.2.1:1234", "[2001:db8::7]:443", "garbage", "::ffff:10.1.2.3",
		" 198.51.100.7 ", "203.0.113.255:0080", "0.0.0.0"} {
		plain := req("x-t: acme").with(func(r *fakeRequest) { r.source = src })
		cached := &cachingRequest{fakeRequest: req("x-t: acme").with(func(r *fakeRequest) { r.source = src })}
		want := c.Match(plain, nil)
		got := c.Match(cached, nil)
		if len(got) != len(want) {
			t.Fatalf("%s: matched %d rules, want %d", src, len(got), len(want))
		}
		for _, r := range want {
			k1, ok1 := r.AppendKey(nil, plain)
			k2, ok2 := r.AppendKey(nil, cached)
			if string(k1) != string(k2) || ok1 != ok2 {
				t.Errorf("%s: rule %s: key %q, %v with the cache; %q, %v without", src, r.Name, k2, ok2, k1, ok1)
			}
		}
		if cached.reads != 1 {
			t.Errorf("%s: source address read %d times, want 1", src, cached.reads)
		}
	}
}

// One cache serves request after request, emptied by Reset in between (as the filter's request
// does): every request gets the keys of a request without a cache, whatever the request
// before it left there (an address written canonically, one whose key part was rendered, a
// failed parse), and its own address is read once.
func TestClientIPCacheReset(t *testing.T) {
	c := mustParse(t, `{"rules":[
		{"name":"a","continue":true,"key":[{"source":"client_ip"}],`+tb+`},
		{"name":"b","key":[{"source":"client_ip","ipv4_prefix":24,"ipv6_prefix":48,"default":"none"}],`+tb+`}]}`)
	cached := &cachingRequest{}
	for _, src := range []string{"192.0.2.1:1234", "[2001:db8::7]:443", "[2001:DB8::8]:443", "garbage",
		"198.51.100.7", "::ffff:10.1.2.3", "192.0.2.1:1234", "[2001:db8::7]:443"} {
		plain := req().with(func(r *fakeRequest) { r.source = src })
		cached.fakeRequest = req().with(func(r *fakeRequest) { r.source = src })
		cached.cache.Reset()
		cached.reads = 0
		for _, r := range c.Rules {
			k1, ok1 := r.AppendKey(nil, plain)
			k2, ok2 := r.AppendKey(nil, cached)
			if string(k1) != string(k2) || ok1 != ok2 {
				t.Errorf("%s: rule %s: key %q, %v with the reused cache; %q, %v without", src, r.Name, k2, ok2, k1, ok1)
			}
		}
		if cached.reads != 1 {
			t.Errorf("%s: source address read %d times, want 1", src, cached.reads)
		}
	}
}

// Rules with identical key parts share a key group; any difference in a part separates them.
func TestSameKey(t *testing.T) {
	c := mustParse(t, `{"rules":[
		{"name":"a","continue":true,"key":[{"source":"client_ip"},{"source":"header","name":"x-t","default":"-"}],`+tb+`},
		{"name":"b","continue":true,"key":[{"source":"client_ip"},{"source":"header","name":"x-t","default":"-"}],`+tb+`},
		{"name":"c","continue":true,"key":[{"source":"client_ip"},{"source":"header","name":"x-t","default":"+"}],`+tb+`},
		{"name":"d","continue":true,"key":[{"source":"client_ip","ipv4_prefix":24},{"source":"header","name":"x-t","default":"-"}],`+tb+`},
		{"name":"e","continue":true,`+tb+`},
		{"name":"f","key":[],`+tb+`}]}`)
	r := c.Rules
	same := [][2]int{{0, 1}, {4, 5}}
	for i := range r {
		for j := range r {
			want := i == j
			for _, p := range same {
				want = want || (p[0] == i && p[1] == j) || (p[0] == j && p[1] == i)
			}
			if got := r[i].SameKey(r[j]); got != want {
				t.Errorf("rules %s and %s: SameKey = %v, want %v", r[i].Name, r[j].Name, got, want)
			}
		}
	}
	if (&Rule{}).SameKey(&Rule{}) {
		t.Error("rules not built by Parse must never share a key")
	}
}

func BenchmarkClientIP(b *testing.B) {
	for _, src := range []string{"192.0.2.1:5555", "[2001:db8::7]:443"} {
		r := req().with(func(r *fakeRequest) { r.source = src })
		b.Run("parse/"+src, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := ClientIP(r, 0); !ok {
					b.Fatal("no address")
				}
			}
		})
		// The filter's request keeps the address: later rules of the request get it for a
		// pointer check.
		cached := &cachingRequest{fakeRequest: r}
		b.Run("cached/"+src, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := ClientIP(cached, 0); !ok {
					b.Fatal("no address")
				}
			}
		})
	}
}

// DuplicatePart names the first header or query part whose header or parameter is repeated
// under "reject" (the default), and nothing for parts that chose first or last, for other
// sources, or for a header or parameter sent once. A rule whose key header is repeated still
// matches: it must not be skipped in favour of later rules, or the repetition would escape the
// limit instead of being refused.
func TestDuplicatePart(t *testing.T) {
	c := mustParse(t, `{"rules":[
		{"name":"a","key":[{"source":"header","name":"x-first","on_duplicate":"first","default":"-"},
			{"source":"client_ip"},{"source":"header","name":"x-api-key"},{"source":"header","name":"x-t"},
			{"source":"query","name":"q","default":"-"},{"source":"query","name":"ql","on_duplicate":"last","default":"-"}],`+tb+`},
		{"name":"b",`+tb+`}]}`)
	r := c.Rules[0]
	withPath := func(r *fakeRequest, path string) *fakeRequest {
		return r.with(func(r *fakeRequest) { r.path = path })
	}
	for _, tc := range []struct {
		req  *fakeRequest
		want string
	}{
		{req("x-api-key: k", "x-t: t"), ""},
		{req("x-api-key: rnd", "x-api-key: real", "x-t: t"), "x-api-key"},
		{req("x-api-key: k", "x-t: 1", "x-t: 2", "x-first: a", "x-first: b"), "x-t"},
		{req("x-api-key: k", "x-t: t", "x-first: a", "x-first: b"), ""},
		{req("x-api-key: a,b", "x-t: t"), ""},
		{withPath(req("x-api-key: k", "x-t: t"), "/x?q=1&ql=2"), ""},
		{withPath(req("x-api-key: k", "x-t: t"), "/x?q=1&q=2"), "q"},
		{withPath(req("x-api-key: k", "x-t: t"), "/x?q=1&%71=2"), "q"},
		{withPath(req("x-api-key: k", "x-t: t"), "/x?ql=1&ql=2"), ""},
	} {
		kp, dup := r.DuplicatePart(tc.req)
		name := ""
		if kp != nil {
			name = kp.Name
		}
		if name != tc.want || dup != (tc.want != "") {
			t.Errorf("%v %s: DuplicatePart = %q, %v; want %q", tc.req.lines, tc.req.path, name, dup, tc.want)
		}
		// The request path asks RepeatsKeyPart (the key walk) first and names the part with
		// duplicatePart (a loop of its own): the two must agree both ways.
		if got := r.RepeatsKeyPart(tc.req); got != (tc.want != "") {
			t.Errorf("%v %s: RepeatsKeyPart = %v; want %v", tc.req.lines, tc.req.path, got, tc.want != "")
		}
		if _, slow := r.duplicatePart(tc.req); slow != (tc.want != "") {
			t.Errorf("%v %s: duplicatePart found %v; want %v", tc.req.lines, tc.req.path, slow, tc.want != "")
		}
		if got := c.Match(tc.req, nil); len(got) != 1 || got[0].Name != "a" {
			t.Errorf("%v: the rule must still match, got %d rules", tc.req.lines, len(got))
		}
	}
}

// The parser records each key part's source kind, and the request path reads the kind, not
// Source: every source must map to its own kind, and a parsed rule's kinds must be those of
// its parts' sources, or AppendKey would read another source than the configuration names.
func TestKeyKindsFollowSources(t *testing.T) {
	sources := []Source{SourceClientIP, SourceHeader, SourceQuery, SourcePath, SourceMethod, SourceRoute, SourceConst}
	seen := map[sourceKind]Source{}
	for _, s := range sources {
		k := kindOf(s)
		require.NotEqual(t, kindUnknown, k, s)
		_, dup := seen[k]
		require.False(t, dup, "%s shares kind %d with %s", s, k, seen[k])
		seen[k] = s
	}
	require.Equal(t, kindUnknown, kindOf("cookie"))

	c, err := Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":1,"window":"1s","key":[
		{"source":"client_ip"},{"source":"header","name":"x-a"},{"source":"query","name":"q"},{"source":"path"},
		{"source":"method"},{"source":"route"},{"source":"const","value":"v"}]}]}`))
	require.NoError(t, err)
	r := c.Rules[0]
	require.Len(t, r.keyKinds, len(r.Key))
	for i := range r.Key {
		require.Equal(t, kindOf(r.Key[i].Source), r.keyKinds[i], "part %d", i)
	}
	// A rule made without the parser, or whose key parts changed since, reads Source.
	r.Key = append(r.Key, KeyPart{Source: SourceConst, Value: "w"})
	require.Equal(t, kindConst, r.keyKind(len(r.Key)-1))
	q := req("x-a: a")
	q.path, q.route = "/p?q=1", "rt"
	key, ok := r.AppendKey(nil, q)
	require.True(t, ok)
	require.Equal(t, "9:192.0.2.11:a1:12:/p3:GET2:rt1:v1:w", string(key))
}
