package config

import (
	"testing"
)

func TestMatchConditions(t *testing.T) {
	cases := []struct {
		name  string
		match string
		req   *fakeRequest
		want  bool
	}{
		{"route listed", `{"routes":["a","api"]}`, req(), true},
		{"route not listed", `{"routes":["a","b"]}`, req(), false},
		{"route is exact", `{"routes":["ap"]}`, req(), false},
		{"route missing", `{"routes":["api"]}`, req().with(func(r *fakeRequest) { r.route = "" }), false},
		{"many routes (map)", `{"routes":["a","b","c","d","e","f","g","h","i","api"]}`, req(), true},
		{"many routes miss", `{"routes":["a","b","c","d","e","f","g","h","i","j"]}`, req(), false},
		{"vhost", `{"virtual_hosts":["example.com"]}`, req(), true},
		{"vhost miss", `{"virtual_hosts":["example.org"]}`, req(), false},
		{"method", `{"methods":["POST","GET"]}`, req(), true},
		{"method miss", `{"methods":["POST"]}`, req(), false},
		{"method is case-sensitive", `{"methods":["GET"]}`, req().with(func(r *fakeRequest) { r.method = "get" }), false},
		{"path exact", `{"path":{"exact":"/login"}}`, req().with(func(r *fakeRequest) { r.path = "/login" }), true},
		{"path exact ignores query", `{"path":{"exact":"/login"}}`, req().with(func(r *fakeRequest) { r.path = "/login?next=/x" }), true},
		{"path exact ignores fragment", `{"path":{"exact":"/login"}}`, req().with(func(r *fakeRequest) { r.path = "/login#x" }), true},
		{"path exact miss", `{"path":{"exact":"/login"}}`, req().with(func(r *fakeRequest) { r.path = "/login/" }), false},
		{"path prefix", `{"path":{"prefix":"/api/"}}`, req().with(func(r *fakeRequest) { r.path = "/api/v1" }), true},
		{"path prefix miss", `{"path":{"prefix":"/api/"}}`, req().with(func(r *fakeRequest) { r.path = "/apix" }), false},
		{"path prefix not in query", `{"path":{"prefix":"/api/"}}`, req().with(func(r *fakeRequest) { r.path = "/x?/api/" }), false},
		{"path regex full", `{"path":{"regex":"/users/[0-9]+"}}`, req().with(func(r *fakeRequest) { r.path = "/users/42?a=1" }), true},
		{"path regex anchored at end", `{"path":{"regex":"/users/[0-9]+"}}`, req().with(func(r *fakeRequest) { r.path = "/users/42/edit" }), false},
		{"path regex anchored at start", `{"path":{"regex":"/admin"}}`, req().with(func(r *fakeRequest) { r.path = "/x/admin" }), false},
		{"path regex alternation anchored", `{"path":{"regex":"/a|/b"}}`, req().with(func(r *fakeRequest) { r.path = "/a/x" }), false},
		{"header present", `{"headers":[{"name":"X-Key","present":true}]}`, req("x-key: 1"), true},
		{"header present miss", `{"headers":[{"name":"x-key","present":true}]}`, req(), false},
		{"header present empty value", `{"headers":[{"name":"x-key","present":true}]}`, req("x-key:"), true},
		{"header absent", `{"headers":[{"name":"x-key","present":false}]}`, req(), true},
		{"header absent miss", `{"headers":[{"name":"x-key","present":false}]}`, req("x-key: 1"), false},
		{"header exact", `{"headers":[{"name":"x-plan","exact":"free"}]}`, req("x-plan: free"), true},
		{"header exact miss", `{"headers":[{"name":"x-plan","exact":"free"}]}`, req("x-plan: freemium"), false},
		{"header exact absent", `{"headers":[{"name":"x-plan","exact":"free"}]}`, req(), false},
		{"header exact empty", `{"headers":[{"name":"x-plan","exact":""}]}`, req("x-plan:"), true},
		{"header exact joined lines", `{"headers":[{"name":"x-plan","exact":"free"}]}`, req("x-plan: free", "x-plan: paid"), false},
		{"header prefix", `{"headers":[{"name":"user-agent","prefix":"curl/"}]}`, req("user-agent: curl/8.0"), true},
		{"header prefix miss", `{"headers":[{"name":"user-agent","prefix":"curl/"}]}`, req("user-agent: Mozilla"), false},
		{"header regex", `{"headers":[{"name":"x-id","regex":"[a-f0-9]{4}"}]}`, req("x-id: beef"), true},
		{"header regex full match", `{"headers":[{"name":"x-id","regex":"[a-f0-9]{4}"}]}`, req("x-id: beefy"), false},
		{"header invert exact", `{"headers":[{"name":"x-plan","exact":"paid","invert":true}]}`, req("x-plan: free"), true},
		{"header invert exact absent", `{"headers":[{"name":"x-plan","exact":"paid","invert":true}]}`, req(), true},
		{"header invert exact hit", `{"headers":[{"name":"x-plan","exact":"paid","invert":true}]}`, req("x-plan: paid"), false},
		{"header invert present", `{"headers":[{"name":"x-plan","present":true,"invert":true}]}`, req(), true},
		{"pseudo-header", `{"headers":[{"name":":authority","exact":"a.example"}]}`, req().with(func(r *fakeRequest) { r.headers[":authority"] = "a.example" }), true},
		{"all conditions (AND)", `{"routes":["api"],"methods":["GET"],"path":{"prefix":"/"},"virtual_hosts":["example.com"],"headers":[{"name":"a","present":true},{"name":"b","present":true}]}`, req("a: 1", "b: 2"), true},
		{"AND: one header fails", `{"headers":[{"name":"a","present":true},{"name":"b","present":true}]}`, req("a: 1"), false},
		{"AND: method fails", `{"routes":["api"],"methods":["POST"]}`, req(), false},
		{"empty match", `{}`, req(), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, oneRule(tb+`,"match":`+tc.match))
			if got := c.Rules[0].Match.matches(tc.req); got != tc.want {
				t.Errorf("matches = %v, want %v", got, tc.want)
			}
			got := c.Match(tc.req, nil)
			if (len(got) == 1) != tc.want {
				t.Errorf("Config.Match returned %d rules", len(got))
			}
		})
	}
}

func names(rules []*Rule) string {
	s := ""
	for i, r := range rules {
		if i > 0 {
			s += ","
		}
		s += r.Name
	}
	return s
}

func TestMatchOrderAndContinue(t *testing.T) {
	c := mustParse(t, `{"rules":[
		{"name":"login-ip", "match":{"path":{"exact":"/login"}}, "key":[{"source":"client_ip"}], `+tb+`, "continue":true},
		{"name":"tenant", "key":[{"source":"header","name":"x-tenant"}], `+tb+`, "continue":true},
		{"name":"tenant-plan", "match":{"headers":[{"name":"x-plan","exact":"free"}]}, "key":[{"source":"header","name":"x-tenant"}], `+tb+`},
		{"name":"catch-all-ip", "key":[{"source":"client_ip"}], `+tb+`},
		{"name":"never", `+tb+`}
	]}`)
	cases := []struct {
		name string
		req  *fakeRequest
		want string
	}{
		{"login with tenant on free plan", req("x-tenant: t1", "x-plan: free").with(func(r *fakeRequest) { r.path = "/login" }), "login-ip,tenant,tenant-plan"},
		{"tenant on paid plan", req("x-tenant: t1", "x-plan: paid"), "tenant,catch-all-ip"},
		{"no tenant: tenant rules skipped, falls through", req("x-plan: free"), "catch-all-ip"},
		{"login, no tenant", req().with(func(r *fakeRequest) { r.path = "/login?x" }), "login-ip,catch-all-ip"},
		{"no client address: only rules that can build a key", req("x-tenant: t").with(func(r *fakeRequest) { r.source = "unix:/tmp/sock" }), "tenant,never"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(c.Match(tc.req, nil)); got != tc.want {
				t.Errorf("Match = %s, want %s", got, tc.want)
			}
		})
	}
	// Match appends to dst.
	dst := []*Rule{c.Rules[4]}
	if got := names(c.Match(req(), dst)); got != "never,catch-all-ip" {
		t.Errorf("Match(dst) = %s", got)
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	c := benchConfig(t)
	r := benchRequest()
	dst := make([]*Rule, 0, 8)
	if n := testing.AllocsPerRun(200, func() { dst = c.Match(r, dst[:0]) }); n != 0 {
		t.Errorf("Match allocates %v times per call", n)
	}
	if len(dst) == 0 {
		t.Fatalf("bench request matched no rule")
	}
}

// MatchSkipped reports the rules whose conditions hold but whose key the request lacks, and
// goes on past them; a rule whose conditions fail, or whose missing part has a default, is not
// skipped.
func TestMatchSkipped(t *testing.T) {
	c := mustParse(t, `{"rules":[
		{"name":"posts","continue":true,"match":{"methods":["POST"]},"key":[{"source":"header","name":"x-t"}],`+tb+`},
		{"name":"tenant","continue":true,"key":[{"source":"header","name":"x-t"}],`+tb+`},
		{"name":"defaulted","continue":true,"key":[{"source":"header","name":"x-t","default":"none"}],`+tb+`},
		{"name":"all",`+tb+`}]}`)
	var skipped []*Rule
	matched := c.MatchSkipped(req(), nil, &skipped)
	names := func(rs []*Rule) (out []string) {
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return out
	}
	if got := names(matched); len(got) != 2 || got[0] != "defaulted" || got[1] != "all" {
		t.Errorf("matched %v, want [defaulted all]", got)
	}
	if got := names(skipped); len(got) != 1 || got[0] != "tenant" {
		t.Errorf("skipped %v, want [tenant]", got)
	}
	skipped = skipped[:0]
	if c.MatchSkipped(req("x-t: a"), nil, &skipped); len(skipped) != 0 {
		t.Errorf("skipped %v with the key part present", names(skipped))
	}
	if got := names(c.Match(req(), nil)); len(got) != 2 {
		t.Errorf("Match %v", got)
	}
}
