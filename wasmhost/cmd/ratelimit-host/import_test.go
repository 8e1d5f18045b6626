package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// importCase is one envoyproxy/ratelimit configuration of testdata/import (each written here
// after an example of that project's README, from its documented format) and what its
// conversion must hold.
type importCase struct {
	file string
	args []string
	// rules are the converted rules, each as "name: limit/window key=... match=... overrides=..."
	// (see summarize).
	rules       []string
	unconverted []string // substrings of the lines listed as not converted, in order
	notes       []string // substrings of notes that must be there
	warnings    []string // substrings of the warnings check gives the result, in order
}

var importCases = []importCase{
	{file: "values.yaml", rules: []string{
		"table_orders: 200/1s match=table=orders",
		"table_carts: 50/1s match=table=carts",
	}, notes: []string{`descriptor key "table" is read from header:table (assumed; -key table=SOURCE to change)`}},
	{file: "nested.yaml", args: []string{"-key", "recipient=query:to", "-key", "channel=header:x-channel"}, rules: []string{
		"channel_sms_recipient: 3/1d key=query:to match=x-channel=sms",
		"recipient: 20/1h key=query:to",
	}},
	{file: "specific.yaml", rules: []string{
		"remote_address: 20/1s key=client_ip/64 overrides=198.51.100.7:100/1s",
	}, unconverted: []string{"descriptors[2].rate_limit.requests_per_unit: 0 (deny every request)"}},
	{file: "levels.yaml", rules: []string{
		"tenant_acme_api_key: 600/1m key=header:api_key match=tenant=acme",
	}},
	{file: "unlimited.yaml", rules: []string{
		"partner: 60/1m key=header:partner overrides=trusted:unlimited",
	}, notes: []string{"descriptors[0]: unlimited: no rule"}},
	{file: "shadow.yaml", rules: []string{
		"app_plan_free: 5/1s shadow key=header:app match=plan=free",
		"app_plan_pro: 50/1s key=header:app match=plan=pro",
	}},
	{file: "replaces.yaml", rules: []string{
		"alice_eu: 4/1s match=region=eu,account=alice,!zone=west",
		"zone_west_account_alice: 12/1s match=zone=west,account=alice",
	}},
	{file: "detailed.yaml", rules: []string{
		"report: 30/1m key=header:report overrides=monthly:2/1m",
	}, unconverted: []string{"descriptors[0].detailed_metric: the filter's metrics are per rule"}},
	{file: "wildcard.yaml", args: []string{"-key", "endpoint=path", "-local"}, rules: []string{
		"endpoint__v2__: 120/1m local match=path^/v2/",
	}},
	{file: "ipv6.yaml", rules: []string{
		"remote_address: 3/1s key=client_ip overrides=2001:db8::1:unlimited,2001:db8::2:100/1s",
	}, unconverted: []string{
		`descriptors[0].value: "2001:DB8:0::1": another override of the key has the value "2001:db8::1"`,
	}, notes: []string{
		`descriptors[2].value: "2001:db8:0:0:0:0:0:2" is written "2001:db8::2"`,
		"descriptors[3]: client_ip key part without ipv6_prefix",
	}, warnings: []string{"client_ip without ipv6_prefix"}},
	{file: "star.yaml", rules: []string{
		"tenant: 7/1m key=header:tenant overrides=acme:100/1m",
	}, notes: []string{
		`descriptors[0]: value "*" matches every value`,
		`descriptors[1]: never applies: the service matches every value to descriptors[0]'s "*" first`,
		`descriptors[3]: never applies: the service matches every value "beta-*" matches to descriptors[0]'s "*" first`,
	}},
	{file: "addresses.yaml", rules: []string{
		"remote_address: 10/1m key=client_ip/64 overrides=10.1.1.1:100/1m",
	}, unconverted: []string{
		`descriptors[1].value: "10.0.0.0/8": not an IP address`,
		`descriptors[2].value: "unknown": not an IP address`,
		`descriptors[3].value: "192.0.2.1/32": not an IP address`,
	}, notes: []string{
		`descriptors[4].value: "::ffff:10.1.1.1" is written "10.1.1.1"`,
		"client_ip key parts take ipv6_prefix 64",
	}},
	{file: "siblings.yaml", args: []string{"-key", "endpoint=path"}, rules: []string{
		"plan_ab__user: 1/1m key=header:user match=plan^ab,!plan=abc",
		"plan_a__user: 2/1m key=header:user match=plan^a,!plan^ab",
		"plan_abc_user: 3/1m key=header:user match=plan=abc",
		"region_x_: 3/1m match=region^x,!region=xy",
		"region_xy: 4/1m match=region=xy",
		"endpoint__v2_health: 6/1m match=path=/v2/health",
	}, unconverted: []string{
		`descriptors[5].value: "/v2/*": the service applies descriptors[6]'s "/v2/health" to some of its requests`,
	}},
	{file: "renamed.yaml", rules: []string{
		"gold: 100/1m key=header:user match=tier=gold",
		"foo: 20/1m key=header:user match=region=eu,!tier=gold",
		"foo_2: 10/1m key=header:user match=!tier=gold",
		"a.b: 30/1m key=header:user match=region=us",
		"a_b_2: 40/1m key=header:user match=region=ap,!tier=gold",
	}, unconverted: []string{
		`descriptors[0].descriptors[0].rate_limit.replaces: "foo_2" names no rate limit`,
	}, notes: []string{
		`replaces "foo": rule "foo" skips`,
		`replaces "foo": rule "foo_2" skips`,
		`replaces "a_b": rule "a_b_2" skips`,
	}},
	{file: "separators.yaml", rules: []string{
		"b.c_v: 5/1m match=b.c=v",
		"b-c_v_2: 6/1m match=b-c=v",
	}},
}

// TestImportExamples converts each example, checks the rules it makes and what it lists as not
// converted, and runs the result through check (-strict: not even a warning).
func TestImportExamples(t *testing.T) {
	for _, tc := range importCases {
		t.Run(tc.file, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "plugin.json")
			var stdout, stderr bytes.Buffer
			args := append(append([]string{}, tc.args...), "-o", out, filepath.Join("testdata", "import", tc.file))
			require.Equal(t, 0, runImport(args, &stdout, &stderr), stderr.String())
			data, err := os.ReadFile(out)
			require.NoError(t, err)
			require.Equal(t, tc.rules, summarize(t, data), "%s", data)
			var unconverted []string
			for _, line := range strings.Split(stderr.String(), "\n") {
				if _, what, ok := strings.Cut(line, ": not converted: "); ok {
					unconverted = append(unconverted, what)
				}
			}
			require.Len(t, unconverted, len(tc.unconverted), stderr.String())
			for i, want := range tc.unconverted {
				require.Contains(t, unconverted[i], want)
			}
			for _, want := range tc.notes {
				require.Contains(t, stderr.String(), want)
			}
			// Every conversion passes the filter's parser and check: without a warning, or with
			// just the ones listed.
			var checkOut, checkErr bytes.Buffer
			require.Equal(t, 0, runCheck([]string{out}, &checkOut, &checkErr), "%s%s\n%s", checkOut.String(), checkErr.String(), data)
			var warnings []string
			for _, line := range strings.Split(checkOut.String(), "\n") {
				if _, what, ok := strings.Cut(line, ": warning: "); ok {
					warnings = append(warnings, what)
				}
			}
			require.Len(t, warnings, len(tc.warnings), checkOut.String())
			for i, want := range tc.warnings {
				require.Contains(t, warnings[i], want)
			}
		})
	}
}

// A configuration of nothing the filter can express is refused, each problem named.
func TestImportNothingConvertible(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 1, runImport([]string{filepath.Join("testdata", "import", "unconvertible.yaml")}, &stdout, &stderr))
	require.Empty(t, stdout.String())
	for _, want := range []string{
		`not converted: descriptors[0].value: "192.0.2.1": the filter has no condition on a client_ip's value here`,
		`not converted: descriptors[1].quota_mode: unknown field`,
		`not converted: descriptors[1].rate_limit.unit: "month"`,
		`not converted: descriptors[2].shadow_mode: the descriptor has no rate_limit`,
		`not converted: descriptors[3].value: "a*b": the filter compares a value or a prefix`,
		`not converted: descriptors[4]: overrides the limit of the key alone, which is not converted`,
		`error: no descriptor with a rate limit could be converted`,
	} {
		require.Contains(t, stderr.String(), want)
	}
	require.Equal(t, 2, runImport([]string{"-key", "x=cookie:y", "f.yaml"}, &stdout, &stderr))
}

// importedHost imports testdata/import/file with args (and -local) and runs the result in the
// real filter, at a fixed time (all requests in one window).
func importedHost(t *testing.T, file string, args ...string) *wasmhost.Host {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the module")
	}
	var stdout, stderr bytes.Buffer
	args = append(append(args, "-local"), filepath.Join("testdata", "import", file))
	require.Equal(t, 0, runImport(args, &stdout, &stderr), stderr.String())
	now := time.Unix(1_800_000_000, 0)
	h, err := wasmhost.New(context.Background(), wasmtest.BuildModule(t), wasmhost.Options{Workers: 1, VMID: "ratelimit",
		PluginName: "ratelimit", PluginConfig: stdout.Bytes(), Clock: func() time.Time { return now }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

// denied sends req n times and returns how many the filter denied.
func denied(t *testing.T, h *wasmhost.Host, n int, req wasmhost.Request) int {
	t.Helper()
	count := 0
	for range n {
		req.Worker, req.Upstream = -1, &wasmhost.UpstreamResponse{Status: 200}
		res, err := h.Do(context.Background(), req)
		require.NoError(t, err)
		if res.Local != nil {
			count++
		}
	}
	return count
}

// The per-address limits imported from ipv6.yaml apply to those IPv6 clients in the filter:
// the unlimited one and the one written in full form are never denied in a second, while
// another address gets the generic 3 per second.
func TestImportedIPv6OverridesMatch(t *testing.T) {
	h := importedHost(t, "ipv6.yaml")
	for _, c := range []struct {
		source string
		denied int
	}{{"[2001:db8::1]:5555", 0}, {"[2001:db8::2]:5555", 0}, {"[2001:db8::3]:5555", 7}} {
		require.Equal(t, c.denied, denied(t, h, 10, wasmhost.Request{SourceAddress: c.source}), "client %s: requests of 10 in one second denied", c.source)
	}
}

// The IPv4-mapped address imported from addresses.yaml gives its IPv4 client 100 a minute;
// another client gets the generic 10.
func TestImportedMappedIPv4OverrideMatches(t *testing.T) {
	h := importedHost(t, "addresses.yaml")
	require.Equal(t, 0, denied(t, h, 20, wasmhost.Request{SourceAddress: "10.1.1.1:5555"}))
	require.Equal(t, 10, denied(t, h, 20, wasmhost.Request{SourceAddress: "10.1.1.2:5555"}))
}

// The rules imported from siblings.yaml limit each request by the one sibling value the
// service applies to it: the exact value, else the first wildcard in order that matches.
func TestImportedWildcardSiblingsMatch(t *testing.T) {
	h := importedHost(t, "siblings.yaml", "-key", "endpoint=path")
	for _, c := range []struct {
		header, value string
		denied        int // of 10
	}{
		{"plan", "abc", 7}, // exact: 3
		{"plan", "abd", 9}, // ab*: 1
		{"plan", "ax", 8},  // a*: 2
		{"region", "xy", 6},
		{"region", "xz", 7},
	} {
		req := wasmhost.Request{Headers: [][2]string{{c.header, c.value}, {"user", "u-" + c.header + "-" + c.value}}}
		require.Equal(t, c.denied, denied(t, h, 10, req), "%s: %s: requests of 10 in one minute denied", c.header, c.value)
	}
}

// summarize renders each rule of a converted configuration on one line.
func summarize(t *testing.T, data []byte) []string {
	var c struct {
		Rules []struct {
			Name     string
			Shadow   bool
			Continue bool
			Scope    string
			Limit    int64
			Window   string
			Key      []struct {
				Source, Name string
				IPv6Prefix   int `json:"ipv6_prefix"`
			}
			Match *struct {
				Path    map[string]string
				Headers []struct {
					Name, Exact, Prefix string
					Invert              bool
				}
			}
			Overrides []struct {
				Exact, Prefix string
				Window        string
				Limit         int64
				Unlimited     bool
			}
		}
	}
	require.NoError(t, json.Unmarshal(data, &c))
	var out []string
	for _, r := range c.Rules {
		require.True(t, r.Continue, r.Name)
		s := r.Name + ": " + itoa(r.Limit) + "/" + r.Window
		if r.Shadow {
			s += " shadow"
		}
		if r.Scope != "global" {
			s += " local"
		}
		var keys []string
		for _, k := range r.Key {
			switch {
			case k.Name != "":
				keys = append(keys, k.Source+":"+k.Name)
			case k.IPv6Prefix != 0:
				keys = append(keys, k.Source+"/"+strconv.Itoa(k.IPv6Prefix))
			default:
				keys = append(keys, k.Source)
			}
		}
		if len(keys) > 0 {
			s += " key=" + strings.Join(keys, ",")
		}
		if m := r.Match; m != nil {
			var conds []string
			for k, v := range m.Path {
				if k == "prefix" {
					conds = append(conds, "path^"+v)
				} else {
					conds = append(conds, "path="+v)
				}
			}
			for _, h := range m.Headers {
				c := h.Name + "=" + h.Exact
				if h.Prefix != "" {
					c = h.Name + "^" + h.Prefix
				}
				if h.Invert {
					c = "!" + c
				}
				conds = append(conds, c)
			}
			s += " match=" + strings.Join(conds, ",")
		}
		var ovs []string
		for _, o := range r.Overrides {
			v := o.Exact
			if o.Prefix != "" {
				v = o.Prefix + "*"
			}
			if o.Unlimited {
				ovs = append(ovs, v+":unlimited")
			} else {
				ovs = append(ovs, v+":"+itoa(o.Limit)+"/"+o.Window)
			}
		}
		if len(ovs) > 0 {
			s += " overrides=" + strings.Join(ovs, ",")
		}
		out = append(out, s)
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
