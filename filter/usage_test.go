package filter

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/sharedstate/memstore"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// usageDriver runs streams with a usage cost under the emulator.
type usageDriver struct {
	*nativeDriver
	t *testing.T
}

func newUsageNative(t *testing.T, config string) usageDriver {
	d := newNative(t, config)
	require.NoError(t, d.host.SetProperty([]string{"xds", "route_name"}, []byte("llm")))
	require.NoError(t, d.host.SetProperty([]string{"source", "address"}, []byte("10.0.0.1:5000")))
	return usageDriver{d, t}
}

// open starts a stream with the request headers hdrs; it returns the stream's id and whether
// the request was admitted.
func (d usageDriver) open(hdrs ...string) (uint32, bool) {
	id := d.host.InitializeHttpContext()
	h := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "llm"}}
	for i := 0; i+1 < len(hdrs); i += 2 {
		h = append(h, [2]string{hdrs[i], hdrs[i+1]})
	}
	d.host.CallOnRequestHeaders(id, h, false)
	if d.host.GetSentLocalResponse(id) != nil {
		d.host.CompleteHttpContext(id)
		return id, false
	}
	return id, true
}

// respond sends response headers and the body in chunks; ended: the last chunk ends the
// stream (false: it is cut short). The stream is then completed.
func (d usageDriver) respond(id uint32, contentType string, hdrs [][2]string, chunks []string, ended bool) {
	h := append([][2]string{{":status", "200"}, {"content-type", contentType}}, hdrs...)
	require.Equal(d.t, types.ActionContinue, d.host.CallOnResponseHeaders(id, h, len(chunks) == 0 && ended))
	for i, c := range chunks {
		last := ended && i == len(chunks)-1
		require.Equal(d.t, types.ActionContinue, d.host.CallOnResponseBody(id, []byte(c), last))
		// The client gets every chunk as it was.
		require.Equal(d.t, c, string(d.host.GetCurrentResponseBody(id)))
	}
	d.host.CompleteHttpContext(id)
}

func (d usageDriver) counter(name string) uint64 {
	return counterNative(d.nativeDriver, name+";rule=llm-minute")
}

func openAIBody(total int) string {
	return `{"id":"x","choices":[{"message":{"content":"hello"}}],"usage":{"prompt_tokens":1,"completion_tokens":` +
		strconv.Itoa(total-1) + `,"total_tokens":` + strconv.Itoa(total) + `}}`
}

const usageConfig = `{"rules":[{"name":"llm-minute","match":{"routes":["llm"]},
	"key":[{"source":"header","name":"x-api-key"}],
	"algorithm":"token_bucket","limit":100,"window":"1m",
	"cost":{"reserve":{"header":"x-max-tokens","default":30,"max":60},
	        "usage":{"json":["/usage/total_tokens"]},"max":200,"on_missing":"reserve"}}]}`

// A reservation is refunded what the response did not use, a usage above it becomes a debt
// the key repays at the rule's rate, and a stream cut short is charged on_missing.
func TestUsageSettlesNative(t *testing.T) {
	d := newUsageNative(t, usageConfig)
	key := []string{"x-api-key", "k1"}
	a, ok := d.open(key...)
	require.True(t, ok)
	b, ok := d.open(key...)
	require.True(t, ok)
	c, ok := d.open(key...)
	require.True(t, ok)
	_, ok = d.open(key...)
	require.False(t, ok, "10 left, 30 reserved")
	require.EqualValues(t, 3, gaugeNative(t, d.nativeDriver, "ratelimit_usage_open;rule=llm-minute"))

	d.respond(a, "application/json", nil, []string{openAIBody(10)[:20], openAIBody(10)[20:]}, true)
	_, ok = d.open(append(key, "x-max-tokens", "31")...)
	require.False(t, ok, "30 left after the refund of 20")
	e, ok := d.open(key...)
	require.True(t, ok, "30 left after the refund of 20")

	d.respond(b, "application/json", nil, []string{openAIBody(50)[:30]}, false) // cut short
	d.respond(c, "text/event-stream", nil, []string{
		"data: {\"choices\":[],\"usage\":null}\n\n",
		"data: {\"choices\":[],\"usage\":{\"total_tokens\":130}}\n\ndata: [DONE]\n\n",
	}, true)
	// 100 below the 30 e needs: 130 units at 100/min is 78s.
	*d.now = t0.Add(78*time.Second - time.Millisecond)
	_, ok = d.open(key...)
	require.False(t, ok)
	*d.now = t0.Add(78 * time.Second)
	f, ok := d.open(key...)
	require.True(t, ok, "the debt is repaid at the rule's rate")
	d.respond(e, "application/json", nil, []string{openAIBody(30)}, true)
	d.respond(f, "application/json", [][2]string{}, nil, true) // no body: no usage

	require.EqualValues(t, 30*5, d.counter("ratelimit_usage_reserved_total"))
	require.EqualValues(t, 10+30+130+30+30, d.counter("ratelimit_usage_settled_total"))
	require.EqualValues(t, 20, d.counter("ratelimit_usage_refunded_total"))
	require.EqualValues(t, 100, d.counter("ratelimit_usage_debt_total"))
	require.EqualValues(t, 2, d.counter("ratelimit_usage_missing_total"))
	require.Zero(t, d.counter("ratelimit_usage_settle_failures_total"))
	require.Zero(t, gaugeNative(t, d.nativeDriver, "ratelimit_usage_open;rule=llm-minute"))

	// Another key was never touched.
	_, ok = d.open("x-api-key", "k2", "x-max-tokens", "60")
	require.True(t, ok)
}

// The usage can come from a response header, and on_missing "max" charges max.
func TestUsageFromHeaderNative(t *testing.T) {
	d := newUsageNative(t, `{"rules":[{"name":"llm-minute","match":{"routes":["llm"]},
		"algorithm":"fixed_window","limit":100,"window":"1h",
		"cost":{"reserve":20,"usage":{"header":"x-usage-tokens"},"max":50,"on_missing":"max"}}]}`)
	a, _ := d.open()
	d.respond(a, "text/plain", [][2]string{{"x-usage-tokens", "5"}}, []string{"hello"}, false)
	b, _ := d.open()
	d.respond(b, "text/plain", [][2]string{{"x-usage-tokens", "500"}}, nil, true) // charged max
	c, _ := d.open()
	d.respond(c, "text/plain", [][2]string{{"x-usage-tokens", "many"}}, nil, true) // missing: max
	// 5 + 50 + 50 = 105 > 100: the window is full.
	_, ok := d.open()
	require.False(t, ok)
	require.EqualValues(t, 1, d.counter("ratelimit_usage_missing_total"))
	require.EqualValues(t, 105, d.counter("ratelimit_usage_settled_total"))
}

// A reported usage too large for an int64 is charged max, in a header as in the body, never
// less than a smaller one: the upstream's value must not lower the charge to on_missing. A
// value that is not a non-negative integer is still missing.
func TestUsageTooLargeIsChargedMaxNative(t *testing.T) {
	// A subtest each: the emulator serves one driver at a time, until its test ends.
	t.Run("header", func(t *testing.T) {
		usageTooLarge(t, `{"header":"x-usage-tokens"}`, func(d usageDriver, id uint32, v string) {
			d.respond(id, "text/plain", [][2]string{{"x-usage-tokens", v}}, nil, true)
		})
	})
	t.Run("body", func(t *testing.T) {
		usageTooLarge(t, `{"json":["/usage/total_tokens"]}`, func(d usageDriver, id uint32, v string) {
			d.respond(id, "application/json", nil, []string{`{"usage":{"total_tokens":` + v + `}}`}, true)
		})
	})
}

// usageTooLarge is TestUsageTooLargeIsChargedMaxNative for a rule of usage source usage, whose
// streams report v with report.
func usageTooLarge(t *testing.T, usage string, report func(d usageDriver, id uint32, v string)) {
	d := newUsageNative(t, `{"rules":[{"name":"llm-minute","match":{"routes":["llm"]},
		"algorithm":"fixed_window","limit":1000,"window":"1h",
		"cost":{"reserve":20,"usage":`+usage+`,"max":50,"on_missing":"reserve"}}]}`)
	for _, v := range []string{"999999999999999999", "1000000000000000000", "99999999999999999999", "123456789012345678901234567890"} {
		id, ok := d.open()
		require.True(t, ok)
		report(d, id, v)
	}
	require.EqualValues(t, 4*50, d.counter("ratelimit_usage_settled_total"), "each usage is charged max")
	require.Zero(t, d.counter("ratelimit_usage_missing_total"))
	for _, v := range []string{"-1", "1.5", "1e3"} {
		id, ok := d.open()
		require.True(t, ok)
		report(d, id, v)
	}
	require.EqualValues(t, 4*50+3*20, d.counter("ratelimit_usage_settled_total"), "a malformed usage is charged on_missing")
	require.EqualValues(t, 3, d.counter("ratelimit_usage_missing_total"))
}

// An override's keys settle on the override's table.
func TestUsageOverrideNative(t *testing.T) {
	d := newUsageNative(t, `{"rules":[{"name":"llm-minute","match":{"routes":["llm"]},
		"key":[{"source":"header","name":"x-api-key"}],
		"algorithm":"gcra","limit":10,"window":"1m",
		"overrides":[{"prefix":"gold-","limit":1000}],
		"cost":{"reserve":10,"usage":{"json":["/usage/total_tokens"]},"max":1000}}]}`)
	for range 3 {
		id, ok := d.open("x-api-key", "gold-1")
		require.True(t, ok)
		d.respond(id, "application/json", nil, []string{openAIBody(330)}, true)
	}
	_, ok := d.open("x-api-key", "gold-1")
	require.True(t, ok, "10 left of 1000")
	_, ok = d.open("x-api-key", "gold-1")
	require.False(t, ok)
	_, ok = d.open("x-api-key", "plain")
	require.True(t, ok, "the rule's own keys are untouched")
}

// A settlement that shared data refuses is counted and logged, and the stream still ends
// normally; the reservation stays charged.
func TestUsageSettleFailureNative(t *testing.T) {
	store := &failingStore{Memory: memstore.New()}
	d := usageDriver{newNativeWithStore(t, usageConfig, store), t}
	require.NoError(t, d.host.SetProperty([]string{"xds", "route_name"}, []byte("llm")))
	require.NoError(t, d.host.SetProperty([]string{"source", "address"}, []byte("10.0.0.1:5000")))
	for range 3 {
		id, ok := d.open("x-api-key", "k")
		require.True(t, ok)
		store.failSet = true
		d.respond(id, "application/json", nil, []string{openAIBody(5)}, true)
		store.failSet = false
	}
	require.EqualValues(t, 3, d.counter("ratelimit_usage_settle_failures_total"))
	require.EqualValues(t, 3*25, d.counter("ratelimit_usage_refunded_total"))
	require.Zero(t, gaugeNative(t, d.nativeDriver, "ratelimit_usage_open;rule=llm-minute"))
	var warned int
	for _, l := range d.host.GetWarnLogs() {
		if strings.Contains(l, "settlement was not written") {
			warned++
		}
	}
	require.Equal(t, 2, warned, "the first and the second failure are logged, the third is not")
	// The three reservations of 30 stay charged: 10 are left.
	_, ok := d.open("x-api-key", "k", "x-max-tokens", "11")
	require.False(t, ok)
	_, ok = d.open("x-api-key", "k", "x-max-tokens", "10")
	require.True(t, ok)
}
