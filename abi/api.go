package abi

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Re-exported host status errors, so that callers can compare errors without importing the
// SDK's types package. Both builds return exactly these values.
var (
	// ErrNotFound is returned when a key, property or header does not exist.
	ErrNotFound = types.ErrorStatusNotFound
	// ErrBadArgument is returned when the host rejected the arguments of a call.
	ErrBadArgument = types.ErrorStatusBadArgument
	// ErrCasMismatch is returned by SetSharedData when another writer got there first.
	ErrCasMismatch = types.ErrorStatusCasMismatch
	// ErrInternalFailure is returned when the host failed for reasons of its own.
	ErrInternalFailure = types.ErrorInternalFailure
	// ErrUnimplemented is returned when the host does not implement a call.
	ErrUnimplemented = types.ErrorUnimplemented
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
