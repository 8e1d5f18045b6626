// Package placeholder is a small filter that exercises every part of the ABI binding the real
// rate limiter needs: headers, shared data with compare-and-swap, an HTTP callout that pauses
// and resumes the request, a local response, metrics and ticks. The shipped module is the
// rate limiter (package filter, registered by the repository root's main.go); this filter is
// built on its own from placeholder/module, for the wasmhost tests and benchmarks, which need
// a guest whose every answer is trivial to predict.
package placeholder

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Shared-data keys the placeholder maintains.
const (
	RequestsKey = "placeholder.requests"
	TicksKey    = "placeholder.ticks"
)

// casAttempts bounds the compare-and-swap loop: under contention from every worker VM a few
// retries are normal, an unbounded loop is not.
const casAttempts = 64

// Config is the placeholder's plugin configuration.
type Config struct {
	Cluster   string `json:"cluster"`   // the cluster /callout calls
	Authority string `json:"authority"` // the callout's :authority; Cluster when empty
}

// NewVMContext returns the VM context to register with abi.SetVMContext.
func NewVMContext() types.VMContext { return &vmContext{} }

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct {
	types.DefaultPluginContext
	cfg      Config
	requests abi.MetricCounter
	ticks    abi.MetricCounter
}

func (p *pluginContext) OnPluginStart(size int) types.OnPluginStartStatus {
	if size > 0 {
		data, err := abi.GetPluginConfiguration()
		if err != nil {
			abi.LogError("placeholder: reading configuration: " + err.Error())
			return types.OnPluginStartStatusFailed
		}
		if err := json.Unmarshal(data, &p.cfg); err != nil {
			abi.LogError("placeholder: configuration: " + err.Error())
			return types.OnPluginStartStatusFailed
		}
	}
	var err1, err2 error
	p.requests, err1 = abi.DefineCounterMetric("placeholder_requests_total")
	p.ticks, err2 = abi.DefineCounterMetric("placeholder_ticks_total")
	if err := errors.Join(err1, err2); err != nil {
		abi.LogError("placeholder: defining metrics: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	if err := abi.SetTickPeriodMilliSeconds(100); err != nil {
		abi.LogError("placeholder: tick period: " + err.Error())
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) OnTick() {
	if _, err := Increment(TicksKey); err != nil {
		abi.LogWarn("placeholder: tick: " + err.Error())
		return
	}
	p.ticks.Increment(1)
}

func (p *pluginContext) NewHttpContext(id uint32) types.HttpContext {
	return &httpContext{plugin: p, id: id}
}

// Increment adds one to the decimal counter stored at key with a bounded compare-and-swap loop
// and returns the new value.
func Increment(key string) (uint64, error) {
	for range casAttempts {
		val, cas, err := abi.GetSharedData(key)
		switch {
		case errors.Is(err, abi.ErrNotFound):
			// Envoy writes a missing key whatever the cas, and any key unconditionally with
			// cas 0; a non-zero cas makes a second creator fail with CasMismatch instead of
			// overwriting the first one's value.
			cas = 1<<32 - 1
		case err != nil:
			return 0, err
		}
		n, _ := strconv.ParseUint(string(val), 10, 64)
		n++
		err = abi.SetSharedData(key, []byte(strconv.FormatUint(n, 10)), cas)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, abi.ErrCasMismatch) {
			return 0, err
		}
	}
	return 0, errors.New("compare-and-swap attempts exhausted")
}

type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	id     uint32
}

func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	if _, err := abi.GetHttpRequestHeader("x-panic"); err == nil {
		panic("placeholder: x-panic header asked for a panic")
	}
	path, _ := abi.GetHttpRequestHeader(":path")
	switch path {
	case "/deny":
		if err := abi.SendHttpResponse(429, [][2]string{{"x-placeholder", "denied"}}, []byte("denied\n"), -1); err != nil {
			abi.LogError("placeholder: local response: " + err.Error())
		}
		return types.ActionPause
	case "/callout":
		return h.callout()
	}
	n, err := Increment(RequestsKey)
	if err != nil {
		abi.LogWarn("placeholder: request counter: " + err.Error())
		return types.ActionContinue
	}
	h.plugin.requests.Increment(1)
	if err := abi.AddHttpRequestHeader("x-request-count", strconv.FormatUint(n, 10)); err != nil {
		abi.LogWarn("placeholder: adding header: " + err.Error())
	}
	return types.ActionContinue
}

func (h *httpContext) callout() types.Action {
	authority := h.plugin.cfg.Authority
	if authority == "" {
		authority = h.plugin.cfg.Cluster
	}
	headers := abi.NewCalloutHeaders([][2]string{{":method", "GET"}, {":path", "/"}, {":authority", authority}})
	_, err := abi.DispatchHttpCall(h.plugin.cfg.Cluster, headers, nil, 1000, h.onCalloutResponse)
	if err != nil {
		abi.LogWarn("placeholder: callout: " + err.Error())
		if err := abi.SendHttpResponse(503, [][2]string{{"x-placeholder", "callout-failed"}}, []byte("callout failed\n"), -1); err != nil {
			abi.LogError("placeholder: local response: " + err.Error())
		}
	}
	return types.ActionPause
}

func (h *httpContext) onCalloutResponse(numHeaders, bodySize, numTrailers int) {
	if abi.CalloutFailed(numHeaders, bodySize, numTrailers) {
		if err := abi.SendHttpResponse(503, [][2]string{{"x-placeholder", "callout-reset"}}, []byte("callout reset\n"), -1); err != nil {
			abi.LogError("placeholder: local response: " + err.Error())
		}
		return
	}
	// A response without :status shows as an empty x-callout-status.
	status, _ := abi.GetHttpCallResponseHeader(":status")
	if err := abi.AddHttpRequestHeader("x-callout-status", status); err != nil {
		abi.LogWarn("placeholder: adding header: " + err.Error())
	}
	if err := abi.ResumeHttpRequest(); err != nil {
		abi.LogWarn("placeholder: resuming: " + err.Error())
	}
}

func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	if err := abi.AddHttpResponseHeaderBytes("x-placeholder", []byte("ok")); err != nil {
		abi.LogWarn("placeholder: adding response header: " + err.Error())
	}
	return types.ActionContinue
}
