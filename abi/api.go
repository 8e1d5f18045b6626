package abi

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Re-exported host status errors, so that callers can compare errors without importing the
// SDK's types package. Both builds return exactly these values.
var (
	ErrNotFound        = types.ErrorStatusNotFound    // no such key, property or header
	ErrBadArgument     = types.ErrorStatusBadArgument // the host rejected the arguments
	ErrCasMismatch     = types.ErrorStatusCasMismatch // another writer got there first
	ErrInternalFailure = types.ErrorInternalFailure   // the host failed for reasons of its own
	ErrUnimplemented   = types.ErrorUnimplemented     // the host does not implement the call
)

// Metric types of proxy_define_metric.
const (
	metricCounter   = 0
	metricGauge     = 1
	metricHistogram = 2
)

// CalloutFailed reports whether a callout response is a reset rather than an HTTP response.
// Envoy turns upstream timeouts, connection failures and missing healthy hosts into ordinary
// responses (504, 503) that always carry at least a :status header; only a reset arrives as
// (0, 0, 0).
func CalloutFailed(numHeaders, bodySize, numTrailers int) bool {
	return numHeaders == 0 && bodySize == 0 && numTrailers == 0
}

// MaxBodyRead is the largest response body read (GetHttpResponseBody) that the Wasm build reads
// into the memory it reuses for every such read; a larger read gets memory of its own.
const MaxBodyRead = 16 << 10

// CalloutHeaders are the headers of HTTP callouts (DispatchHttpCall), encoded once by
// NewCalloutHeaders for every call that sends them rather than on each call.
type CalloutHeaders struct {
	pairs   [][2]string // for the native build, whose SDK takes pairs
	encoded []byte      // the proxy-wasm map encoding the Wasm build hands to the host
}

// NewCalloutHeaders prepares pairs, which must include :method, :path and :authority.
func NewCalloutHeaders(pairs [][2]string) CalloutHeaders {
	return CalloutHeaders{pairs: pairs, encoded: encodeHeaders(pairs)}
}
