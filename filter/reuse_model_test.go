package filter

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/stretchr/testify/require"
)

// modelRequest is a request as config.Request sees it, answered from the step itself with no
// cache: what the filter's request, reused from one request to the next, must answer.
type modelRequest struct{ s step }

func (m modelRequest) lines(name string) []string {
	var out []string
	for _, kv := range m.s.RequestHeaders() {
		if strings.ToLower(kv[0]) == name {
			out = append(out, kv[1])
		}
	}
	return out
}

// Header answers as Envoy's single-value lookup does (the first line), except for
// x-forwarded-for, whose lines the filter joins (see request.Header).
func (m modelRequest) Header(name string) (string, bool) {
	l := m.lines(name)
	if len(l) == 0 {
		return "", false
	}
	if name == "x-forwarded-for" {
		return strings.Join(l, ","), true
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

func (m modelRequest) Method() string                       { method, _ := m.s.MethodPath(); return method }
func (m modelRequest) Path() string                         { _, path := m.s.MethodPath(); return path }
func (m modelRequest) Route() string                        { return orNone(m.s.Route) }
func (m modelRequest) VirtualHost() string                  { return orNone(m.s.VHost) }
func (m modelRequest) SourceAddress() string                { return m.s.SourceAddress() }
func (m modelRequest) ClientIPCache() *config.ClientIPCache { return nil }

// The filter keeps one request view per plugin and, between requests, marks what it cached
// as unread rather than clearing it (request.reset, config.ClientIPCache.Reset). Request
// after request of every address shape (IPv4 and IPv6, with and without a port, IPv4-mapped,
// with a zone, unparsable), with key headers, X-Forwarded-For lines and query parameters
// present, absent and repeated, each request must be matched, keyed and refused exactly as a
// request read afresh (modelRequest, no cache): every rule allows one request per key, so a
// key, client IP or duplicate check left over from the request before shows as a wrong
// status. Some streams end before their response, and some stay open while later requests
// run on other contexts.
func TestReusedRequestMatchesAFreshOneNative(t *testing.T) {
	sources, xffs := filtertest.ReuseSources, filtertest.ReuseForwardedFor
	for _, c := range []struct {
		hops    int
		onDupXF string
	}{{0, "reject"}, {1, "first"}, {2, "last"}} {
		t.Run(fmt.Sprintf("trusted_hops=%d", c.hops), func(t *testing.T) {
			cfgText := filtertest.ReuseConfig(c.hops, c.onDupXF)
			cfg, err := config.Parse([]byte(cfgText))
			require.NoError(t, err)
			d := newNative(t, cfgText)
			rnd := rand.New(rand.NewSource(int64(c.hops) + 1))
			pick := func(xs []string) string { return xs[rnd.Intn(len(xs))] }
			seen := map[string]bool{}
			var open []uint32
			at := t0
			for i := range 600 {
				at = at.Add(time.Millisecond)
				s := step{Source: pick(sources), Method: pick([]string{"GET", "POST"}),
					Path: pick([]string{"/", "/a/b"}) + pick([]string{"", "?q=1", "?q=1&q=2", "?%71=2", "?q=", "?r=1"})}
				for range rnd.Intn(3) {
					s.Headers = append(s.Headers, hdr("x-k", pick([]string{"a", "b", ""})))
				}
				for range rnd.Intn(3) {
					s.Headers = append(s.Headers, hdr("x-forwarded-for", pick(xffs)))
				}
				rnd.Shuffle(len(s.Headers), func(i, j int) { s.Headers[i], s.Headers[j] = s.Headers[j], s.Headers[i] })

				// What a fresh request gets (filtertest.FreshVerdict): 400 from the first
				// matched rule with a repeated key part, else 429 from the first rule whose key
				// was seen (nothing charged), else through, every matched rule's key charged.
				want, wantRule := filtertest.FreshVerdict(cfg, modelRequest{s}, seen)

				// The request, on the emulator; a fifth of the streams end without a response,
				// a fifth stay open until a later request.
				require.NoError(t, d.host.SetProperty([]string{"xds", "route_name"}, []byte(orNone(s.Route))))
				require.NoError(t, d.host.SetProperty([]string{"xds", "virtual_host_name"}, []byte(orNone(s.VHost))))
				require.NoError(t, d.host.SetProperty([]string{"source", "address"}, []byte(s.SourceAddress())))
				id := d.host.InitializeHttpContext()
				d.host.CallOnRequestHeaders(id, s.RequestHeaders(), true)
				got, body := 0, ""
				if resp := d.host.GetSentLocalResponse(id); resp != nil {
					got, body = int(resp.StatusCode), string(resp.Data)
				}
				require.Equal(t, want, got, "request %d %+v (rule %s): body %s", i, s, wantRule, body)
				if want == 400 {
					require.Contains(t, body, `"rule":"`+wantRule+`"`, "request %d", i)
				}
				switch rnd.Intn(5) {
				case 0:
					d.host.CompleteHttpContext(id)
				case 1:
					open = append(open, id)
				default:
					if got == 0 {
						d.host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
					}
					d.host.CompleteHttpContext(id)
				}
				if len(open) > 0 && rnd.Intn(3) == 0 {
					d.host.CompleteHttpContext(open[0])
					open = open[1:]
				}
			}
			for _, id := range open {
				d.host.CompleteHttpContext(id)
			}
		})
	}
}
