package moduletest

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// modelRequest is a request as config.Request sees it, answered from the request itself with
// no cache: what the module's request view, reused from one request to the next, must answer.
type modelRequest struct{ r wasmhost.Request }

// lines returns the header's lines as the filter sees them: the host folds the lines of
// x-forwarded-for into one, joined by ",", as Envoy does for the headers it indexes inline.
func (m modelRequest) lines(name string) []string {
	var out []string
	for _, kv := range m.r.Headers {
		if kv[0] == name {
			out = append(out, kv[1])
		}
	}
	if name == "x-forwarded-for" && len(out) > 1 {
		return []string{strings.Join(out, ",")}
	}
	return out
}

func (m modelRequest) Header(name string) (string, bool) {
	l := m.lines(name)
	if len(l) == 0 {
		return "", false
	}
	return l[0], true
}

func (m modelRequest) HeaderLines(name string) (first, last string, n int) {
	l := m.lines(name)
	if len(l) == 0 {
		return "", "", 0
	}
	return l[0], l[len(l)-1], len(l)
}

func (m modelRequest) Method() string                       { return m.r.Method }
func (m modelRequest) Path() string                         { return m.r.Path }
func (m modelRequest) Route() string                        { return m.r.RouteName }
func (m modelRequest) VirtualHost() string                  { return m.r.VirtualHost }
func (m modelRequest) SourceAddress() string                { return m.r.SourceAddress }
func (m modelRequest) ClientIPCache() *config.ClientIPCache { return nil }

// The compiled module keeps one request view per plugin and, between requests, marks what it
// cached as unread rather than clearing it (the filter's request.reset,
// config.ClientIPCache.Reset). Request after request on one worker VM, of every address shape
// (IPv4 and IPv6, with and without a port, IPv4-mapped, with a zone, unparsable), with key
// headers, X-Forwarded-For and query parameters present, absent and repeated, each request
// must be matched, keyed and refused exactly as a request read afresh (modelRequest): every
// rule allows one request per key, so anything left over from the request before shows as a
// wrong status. The native twin is filter's TestReusedRequestMatchesAFreshOneNative.
func TestReusedRequestMatchesAFreshOneWasm(t *testing.T) {
	t.Parallel()
	sources, xffs := filtertest.ReuseSources, filtertest.ReuseForwardedFor
	wasm := wasmtest.BuildModule(t)
	for _, hops := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("trusted_hops=%d", hops), func(t *testing.T) {
			// The host folds X-Forwarded-For lines into one, as Envoy does, so on_duplicate
			// never applies to it here.
			cfgText := filtertest.ReuseConfig(hops, "reject")
			cfg, err := config.Parse([]byte(cfgText))
			require.NoError(t, err)
			// Shared data of its own: each configuration counts its keys from zero.
			h, err := wasmhost.New(context.Background(), wasm, wasmhost.Options{Workers: 1,
				PluginConfig: []byte(cfgText), VirtualClock: wasmhost.NewVirtualClock(t0),
				SharedData: wasmhost.NewSharedData()})
			require.NoError(t, err)
			t.Cleanup(func() { _ = h.Close(context.Background()) })
			rnd := rand.New(rand.NewSource(int64(hops) + 1))
			pick := func(xs []string) string { return xs[rnd.Intn(len(xs))] }
			seen := map[string]bool{}
			for i := range 300 {
				req := wasmhost.Request{Worker: 0, SourceAddress: pick(sources), Method: pick([]string{"GET", "POST"}),
					Path:      pick([]string{"/", "/a/b"}) + pick([]string{"", "?q=1", "?q=1&q=2", "?%71=2", "?q=", "?r=1"}),
					RouteName: "r", VirtualHost: "vh"}
				for range rnd.Intn(3) {
					req.Headers = append(req.Headers, [2]string{"x-k", pick([]string{"a", "b", ""})})
				}
				for range rnd.Intn(3) {
					req.Headers = append(req.Headers, [2]string{"x-forwarded-for", pick(xffs)})
				}
				rnd.Shuffle(len(req.Headers), func(i, j int) { req.Headers[i], req.Headers[j] = req.Headers[j], req.Headers[i] })

				// What a fresh request gets (filtertest.FreshVerdict): 400 from the first
				// matched rule with a repeated key part, else 429 from the first rule whose key
				// was seen (nothing charged), else through (200), every matched rule's key charged.
				want, wantRule := filtertest.FreshVerdict(cfg, modelRequest{req}, seen)
				if want == 0 {
					want = 200
				}

				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := h.Do(ctx, req)
				cancel()
				require.NoError(t, err)
				body := ""
				if res.Local != nil {
					body = string(res.Local.Body)
				}
				require.Equal(t, want, res.Status, "request %d %+v (rule %s): body %s", i, req, wantRule, body)
				if want == 400 {
					require.Contains(t, body, `"rule":"`+wantRule+`"`, "request %d", i)
				}
			}
		})
	}
}
