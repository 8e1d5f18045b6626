//go:build !wasip1

package abi

import (
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// This file is the native build: every call delegates to the SDK's proxywasm package, whose
// host calls are answered by the SDK's proxytest emulator in `go test`. The functions are the
// wasip1 build's, documented there; the comments here say only where the native build differs.

// SetVMContext registers the filter with the SDK (and so with proxytest).
func SetVMContext(ctx types.VMContext) { proxywasm.SetVMContext(ctx) }

func GetPluginConfiguration() ([]byte, error) { return proxywasm.GetPluginConfiguration() }

func SetTickPeriodMilliSeconds(millis uint32) error {
	return proxywasm.SetTickPeriodMilliSeconds(millis)
}

func SetEffectiveContext(contextID uint32) error { return proxywasm.SetEffectiveContext(contextID) }

func GetHttpRequestHeader(key string) (string, error) { return proxywasm.GetHttpRequestHeader(key) }

// GetHttpRequestHeaderMap reads the whole request header map once (see the wasip1 version).
func GetHttpRequestHeaderMap() (HeaderMap, error) {
	pairs, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		return HeaderMap{}, err
	}
	return HeaderMap{encodeHeaders(pairs)}, nil
}

func AddHttpRequestHeader(key, value string) error {
	return proxywasm.AddHttpRequestHeader(key, value)
}

func RemoveHttpRequestHeader(key string) error {
	return proxywasm.RemoveHttpRequestHeader(key)
}

func GetHttpResponseHeader(key string) (string, error) {
	return proxywasm.GetHttpResponseHeader(key)
}

// AddHttpResponseHeaderBytes appends a response header value held in a byte slice, which the
// caller may reuse afterwards. The emulator may keep the string it is given, so the value is
// copied here; a Wasm host copies it during the call.
func AddHttpResponseHeaderBytes(key string, value []byte) error {
	return proxywasm.AddHttpResponseHeader(key, string(value))
}

func ResumeHttpRequest() error { return proxywasm.ResumeHttpRequest() }

// SendHttpResponse sends a local response on the current stream.
func SendHttpResponse(statusCode uint32, headers [][2]string, body []byte, grpcStatus int32) error {
	if len(headers) == 0 {
		// The emulator panics on an empty serialised header map, while a map with a zero count
		// is fine; one harmless header sidesteps that quirk without changing Envoy behaviour.
		headers = [][2]string{{"content-length", strconv.Itoa(len(body))}}
	}
	return proxywasm.SendHttpResponse(statusCode, headers, body, grpcStatus)
}

// DispatchHttpCallAlways is DispatchHttpCall natively: the SDK's emulator drops the response of
// a deleted stream, so native tests deliver a late answer before they complete the stream.
func DispatchHttpCallAlways(cluster string, headers CalloutHeaders, body []byte, timeoutMillis uint32,
	callback func(numHeaders, bodySize, numTrailers int)) (uint32, error) {
	return proxywasm.DispatchHttpCall(cluster, headers.pairs, body, nil, timeoutMillis, callback)
}

func DispatchHttpCall(cluster string, headers CalloutHeaders, body []byte, timeoutMillis uint32,
	callback func(numHeaders, bodySize, numTrailers int)) (uint32, error) {
	return proxywasm.DispatchHttpCall(cluster, headers.pairs, body, nil, timeoutMillis, callback)
}

// GetHttpCallResponseHeader returns one header of the callout response being delivered, or
// ErrNotFound. The SDK has no single-value getter for callout headers, so the map is scanned.
func GetHttpCallResponseHeader(key string) (string, error) {
	hdrs, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		return "", err
	}
	for _, kv := range hdrs {
		if kv[0] == key {
			return kv[1], nil
		}
	}
	return "", ErrNotFound
}

func GetHttpResponseBody(start, maxSize int) ([]byte, error) {
	return proxywasm.GetHttpResponseBody(start, maxSize)
}

func GetHttpCallResponseBody(start, maxSize int) ([]byte, error) {
	return proxywasm.GetHttpCallResponseBody(start, maxSize)
}

// GetSharedData copies the value the emulator returns, its own stored slice, so that callers
// get what Envoy gives them, a buffer of their own.
func GetSharedData(key string) ([]byte, uint32, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	return append([]byte(nil), v...), cas, err
}

func SetSharedData(key string, value []byte, cas uint32) error {
	return proxywasm.SetSharedData(key, value, cas)
}

func WallClockNanos() int64 { return time.Now().UnixNano() }

func SetProperty(path, value string) error {
	return proxywasm.SetProperty([]string{path}, []byte(value))
}

func GetPropertyString(path []string) (string, error) {
	b, err := proxywasm.GetProperty(path)
	return string(b), err
}

func GetPropertyPath(path PropertyPath) (string, error) { return GetPropertyString(path.segments()) }

func (p PropertyPath) segments() []string { return strings.Split(string(p), "\x00") }

type MetricCounter struct{ m proxywasm.MetricCounter }

type MetricGauge struct{ m proxywasm.MetricGauge }

type MetricHistogram struct{ m proxywasm.MetricHistogram }

// define converts the SDK's panic on a failed definition into an error.
func define[T any](f func() T) (m T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = ErrInternalFailure
		}
	}()
	return f(), nil
}

func DefineCounterMetric(name string) (MetricCounter, error) {
	m, err := define(func() proxywasm.MetricCounter { return proxywasm.DefineCounterMetric(name) })
	return MetricCounter{m}, err
}

func DefineGaugeMetric(name string) (MetricGauge, error) {
	m, err := define(func() proxywasm.MetricGauge { return proxywasm.DefineGaugeMetric(name) })
	return MetricGauge{m}, err
}

func DefineHistogramMetric(name string) (MetricHistogram, error) {
	m, err := define(func() proxywasm.MetricHistogram { return proxywasm.DefineHistogramMetric(name) })
	return MetricHistogram{m}, err
}

func (c MetricCounter) Increment(offset uint64) { c.m.Increment(offset) }

// Record sets the gauge to value. The emulator only offers Add, so Record adds the difference.
func (g MetricGauge) Record(value int64) { g.m.Add(value - g.m.Value()) }

func (g MetricGauge) Add(delta int64) { g.m.Add(delta) }

// Record adds one observation to the histogram.
func (h MetricHistogram) Record(value uint64) { h.m.Record(value) }

func LogDebug(msg string) { proxywasm.LogDebug(msg) }

func LogInfo(msg string) { proxywasm.LogInfo(msg) }

func LogWarn(msg string) { proxywasm.LogWarn(msg) }

func LogError(msg string) { proxywasm.LogError(msg) }

func LogCritical(msg string) { proxywasm.LogCritical(msg) }
