//go:build wasip1

package abi

import (
	"errors"
	"strconv"
	"unsafe"
)

// Host status codes of ABI 0.2.1.
const (
	statusOK               = 0
	statusNotFound         = 1
	statusBadArgument      = 2
	statusEmpty            = 7
	statusCasMismatch      = 8
	statusInternalFailure  = 10
	statusBrokenConnection = 11
	statusUnimplemented    = 12
)

// Map and buffer types of ABI 0.2.1.
const (
	mapRequestHeaders      = 0
	mapResponseHeaders     = 2
	mapCalloutResponseHdrs = 6
	bufferResponseBody     = 1
	bufferCalloutResponse  = 4
	bufferVMConfiguration  = 6
	bufferPluginConfig     = 7
	streamRequest          = 0
	streamResponse         = 1
)

// statusError maps a host status code to the SDK's error values, so that errors.Is works the
// same in the wasip1 and the native build. It is inlined: a host call that succeeds, as nearly
// all do, costs a comparison; statusFailure, a call of its own, maps the other statuses.
func statusError(st uint32) error {
	if st == statusOK {
		return nil
	}
	return statusFailure(st)
}

func statusFailure(st uint32) error {
	switch st {
	case statusNotFound:
		return ErrNotFound
	case statusBadArgument:
		return ErrBadArgument
	case statusEmpty:
		return errEmpty
	case statusCasMismatch:
		return ErrCasMismatch
	case statusInternalFailure:
		return ErrInternalFailure
	case statusUnimplemented:
		return ErrUnimplemented
	default:
		return errors.New("host returned status " + strconv.FormatUint(uint64(st), 10))
	}
}

var errEmpty = errors.New("error status returned by host: empty")

// The host writes the address, size and CAS number of the data it returns into these. A local
// variable whose address is passed to the host would be moved to the heap (the compiler cannot
// see that an imported function keeps no pointer): one allocation per host read. Package
// variables cost nothing and, unlike a goroutine's stack, never move while the host holds their
// address (the host calls back into the allocator before it writes them, which may grow the
// stack). A VM is single-threaded and the allocator makes no host read, so one set is enough.
var retAddr, retSize, retCas uint32

// getBuffer reads a piece of a buffer. retAddr and retSize are zeroed first: a host that
// answers OK with nothing to return may leave them unwritten, and the body's buffer is reused
// from piece to piece, so stale values would read the previous piece again.
func getBuffer(bufferType uint32, start, maxSize int) ([]byte, error) {
	retAddr, retSize = 0, 0
	return read(hostGetBufferBytes(bufferType, uint32(start), uint32(maxSize), &retAddr, &retSize))
}

// GetPluginConfiguration returns the plugin configuration bytes. Valid only in OnPluginStart.
func GetPluginConfiguration() ([]byte, error) {
	return getBuffer(bufferPluginConfig, 0, 1<<31-1)
}

// SetTickPeriodMilliSeconds asks the host to call OnTick of the current plugin context every
// millis milliseconds; 0 stops the ticks.
func SetTickPeriodMilliSeconds(millis uint32) error {
	return statusError(hostSetTickPeriod(millis))
}

// SetEffectiveContext makes later host calls act on the given context, e.g. the paused stream
// an HTTP callout was made for.
func SetEffectiveContext(contextID uint32) error {
	return statusError(hostSetEffectiveContext(contextID))
}

// getMapValue reads one header. The bytes belong to this call alone, so the string shares
// them instead of copying (as in GetPropertyString and GetPropertyPath).
func getMapValue(mapType uint32, key string) (string, error) {
	b, err := read(hostGetHeaderMapValue(mapType, unsafe.StringData(key), uint32(len(key)), &retAddr, &retSize))
	return unsafe.String(unsafe.SliceData(b), len(b)), err
}

// GetHttpRequestHeader returns one request header value, or ErrNotFound.
func GetHttpRequestHeader(key string) (string, error) { return getMapValue(mapRequestHeaders, key) }

// GetHttpRequestHeaderMap reads the whole request header map with one host call and keeps it
// as the host wrote it, so that every header read of the request (HeaderMap) scans the same
// bytes instead of asking the host again.
func GetHttpRequestHeaderMap() (HeaderMap, error) {
	b, err := read(hostGetHeaderMapPairs(mapRequestHeaders, &retAddr, &retSize))
	return HeaderMap{b}, err
}

// AddHttpRequestHeader appends a request header value.
func AddHttpRequestHeader(key, value string) error {
	return statusError(hostAddHeaderMapValue(mapRequestHeaders, unsafe.StringData(key), uint32(len(key)), unsafe.StringData(value), uint32(len(value))))
}

// RemoveHttpRequestHeader removes every line of a request header.
func RemoveHttpRequestHeader(key string) error {
	return statusError(hostRemoveHeaderMapValue(mapRequestHeaders, unsafe.StringData(key), uint32(len(key))))
}

// GetHttpResponseHeader returns one response header value, or ErrNotFound.
func GetHttpResponseHeader(key string) (string, error) {
	return getMapValue(mapResponseHeaders, key)
}

// AddHttpResponseHeaderBytes appends a response header value held in a byte slice, which the
// host copies during the call: the caller may reuse the slice afterwards, and needs no string
// (an allocation) for it.
func AddHttpResponseHeaderBytes(key string, value []byte) error {
	return statusError(hostAddHeaderMapValue(mapResponseHeaders, unsafe.StringData(key), uint32(len(key)), unsafe.SliceData(value), uint32(len(value))))
}

// ResumeHttpRequest resumes a request paused by an ActionPause from OnHttpRequestHeaders.
func ResumeHttpRequest() error { return statusError(hostContinueStream(streamRequest)) }

// SendHttpResponse sends a local response on the current stream; the stream stops there.
func SendHttpResponse(statusCode uint32, headers [][2]string, body []byte, grpcStatus int32) error {
	hdr := encodeHeaders(headers)
	const details = "rate_limited"
	return statusError(hostSendLocalResponse(statusCode, unsafe.StringData(details), uint32(len(details)),
		unsafe.SliceData(body), uint32(len(body)), unsafe.SliceData(hdr), uint32(len(hdr)), grpcStatus))
}

// DispatchHttpCall sends an HTTP request, without trailers, to an Envoy cluster. The response
// is delivered to callback, with the calling stream made the effective context again, when it
// arrives; if the calling stream is gone by then the callback is not called.
func DispatchHttpCall(cluster string, headers CalloutHeaders, body []byte, timeoutMillis uint32,
	callback func(numHeaders, bodySize, numTrailers int)) (uint32, error) {
	return dispatchHTTPCall(cluster, headers, body, timeoutMillis, callback, false)
}

// DispatchHttpCallAlways is DispatchHttpCall whose callback is also called when the calling
// stream is gone by the time the response arrives (Envoy does not cancel a torn-down stream's
// callouts): the callback then runs with the root context effective and must use nothing of
// the stream, only the callout's response and VM-wide state. It is for a response that
// carries something the VM must keep whoever asked, such as units a store has debited.
func DispatchHttpCallAlways(cluster string, headers CalloutHeaders, body []byte, timeoutMillis uint32,
	callback func(numHeaders, bodySize, numTrailers int)) (uint32, error) {
	return dispatchHTTPCall(cluster, headers, body, timeoutMillis, callback, true)
}

// dispatchHTTPCall makes the proxy_http_call of both and registers its callback. The token is
// written into a package variable (as retAddr is): the host copies what it needs before
// proxy_http_call returns, and a token of the call's own would be an allocation per call.
func dispatchHTTPCall(cluster string, headers CalloutHeaders, body []byte, timeoutMillis uint32,
	callback func(numHeaders, bodySize, numTrailers int), always bool) (uint32, error) {
	hdr := headers.encoded
	st := hostHTTPCall(unsafe.StringData(cluster), uint32(len(cluster)), unsafe.SliceData(hdr), uint32(len(hdr)),
		unsafe.SliceData(body), uint32(len(body)), &noTrailers[0], uint32(len(noTrailers)), timeoutMillis, &calloutToken)
	if st != statusOK {
		return 0, statusError(st)
	}
	registerCallout(calloutToken, callback, always)
	return calloutToken, nil
}

var (
	noTrailers   = [4]byte{} // an empty map: a zero count
	calloutToken uint32
)

// GetHttpCallResponseHeader returns one header of the callout response being delivered, or
// ErrNotFound. Reading one value is much cheaper than decoding the whole map.
func GetHttpCallResponseHeader(key string) (string, error) {
	return getMapValue(mapCalloutResponseHdrs, key)
}

// GetHttpResponseBody returns up to maxSize bytes from start of the response body chunk being
// delivered to OnHttpResponseBody. Up to MaxBodyRead bytes, they are in memory the VM reuses for
// the next response body read: use them before reading again.
func GetHttpResponseBody(start, maxSize int) ([]byte, error) {
	intoBody = true
	b, err := getBuffer(bufferResponseBody, start, maxSize)
	intoBody = false
	return b, err
}

// GetHttpCallResponseBody returns up to maxSize bytes from start of the callout response body.
func GetHttpCallResponseBody(start, maxSize int) ([]byte, error) {
	return getBuffer(bufferCalloutResponse, start, maxSize)
}

// GetSharedData reads a key of the VM-id-wide shared data with its CAS number.
func GetSharedData(key string) ([]byte, uint32, error) {
	b, err := read(hostGetSharedData(unsafe.StringData(key), uint32(len(key)), &retAddr, &retSize, &retCas))
	if err != nil {
		return nil, 0, err
	}
	return b, retCas, nil
}

// SetSharedData writes a key if its CAS number is still cas (0: unconditionally); otherwise
// it returns ErrCasMismatch.
func SetSharedData(key string, value []byte, cas uint32) error {
	return statusError(hostSetSharedData(unsafe.StringData(key), uint32(len(key)), unsafe.SliceData(value), uint32(len(value)), cas))
}

// pathBuf holds the encoded path of the property being read, reused from read to read.
var pathBuf []byte

// GetPropertyString reads a host property such as {"xds", "route_name"} as a string.
func GetPropertyString(path []string) (string, error) {
	pathBuf = appendPath(pathBuf[:0], path)
	b, err := read(hostGetProperty(unsafe.SliceData(pathBuf), uint32(len(pathBuf)), &retAddr, &retSize))
	return unsafe.String(unsafe.SliceData(b), len(b)), err
}

// GetPropertyPath reads a host property as a string, like GetPropertyString, from a path
// already encoded (see PropertyPath) rather than encoded on every read.
func GetPropertyPath(path PropertyPath) (string, error) {
	b, err := read(hostGetProperty(unsafe.StringData(string(path)), uint32(len(path)), &retAddr, &retSize))
	return unsafe.String(unsafe.SliceData(b), len(b)), err
}

// SetProperty sets a property of the current stream: Envoy keeps it in the stream's filter
// state under "wasm." and the path (a property path of one segment is the name itself), where
// its access log reads it with %FILTER_STATE(wasm.<path>:PLAIN)%.
func SetProperty(path, value string) error {
	return statusError(hostSetProperty(unsafe.StringData(path), uint32(len(path)), unsafe.StringData(value), uint32(len(value))))
}

// WallClockNanos returns the wall clock in Unix nanoseconds with one host call; time.Now makes
// two, as it also reads the monotonic clock. Should the host fail the call (Envoy's never does
// for the real-time clock), the last good reading stands: the limiters see a clock that
// stalls rather than one at 0 (the Unix epoch). The Go runtime's own clock reads, time.Now's
// included, abort the VM instead ("clock_time_get failed").
func WallClockNanos() int64 {
	var t uint64
	if wasiClockTimeGet(clockRealtime, 0, &t) != 0 {
		return lastWallClock
	}
	lastWallClock = int64(t)
	return int64(t)
}

var lastWallClock int64 // WallClockNanos's last good reading

const clockRealtime = 0

// Host metrics: a counter, a gauge and a histogram.
type (
	MetricCounter   uint32
	MetricGauge     uint32
	MetricHistogram uint32
)

func defineMetric(metricType uint32, name string) (uint32, error) {
	var id uint32
	err := statusError(hostDefineMetric(metricType, unsafe.StringData(name), uint32(len(name)), &id))
	return id, err
}

// DefineCounterMetric defines (or finds) the counter called name.
func DefineCounterMetric(name string) (MetricCounter, error) {
	id, err := defineMetric(metricCounter, name)
	return MetricCounter(id), err
}

// DefineGaugeMetric defines (or finds) the gauge called name.
func DefineGaugeMetric(name string) (MetricGauge, error) {
	id, err := defineMetric(metricGauge, name)
	return MetricGauge(id), err
}

// DefineHistogramMetric defines (or finds) the histogram called name.
func DefineHistogramMetric(name string) (MetricHistogram, error) {
	id, err := defineMetric(metricHistogram, name)
	return MetricHistogram(id), err
}

// Increment adds offset to the counter. Errors are dropped: a metric must never fail a request.
func (m MetricCounter) Increment(offset uint64) { hostIncrementMetric(uint32(m), int64(offset)) }

// Record sets the gauge to value.
func (m MetricGauge) Record(value int64) { hostRecordMetric(uint32(m), uint64(value)) }

// Add adds delta to the gauge. Envoy's proxy_increment_metric adds a positive offset to a
// gauge and subtracts a negative one, and stats are process-wide, so every worker VM's deltas
// sum into one value, where Record would let the last writer win.
func (m MetricGauge) Add(delta int64) { hostIncrementMetric(uint32(m), delta) }

// Record adds one observation to the histogram.
func (m MetricHistogram) Record(value uint64) { hostRecordMetric(uint32(m), value) }

// Log levels of proxy_log.
const (
	levelTrace    = 0
	levelDebug    = 1
	levelInfo     = 2
	levelWarn     = 3
	levelError    = 4
	levelCritical = 5
)

// logLevel caches the host's log level so that disabled levels cost no formatting and no host
// call. It is read once per VM on first use; Envoy changes it rarely and a stale value only
// affects verbosity.
var logLevel = -1

func enabled(level uint32) bool {
	if logLevel < 0 {
		var l uint32
		if hostGetLogLevel(&l) == statusOK {
			logLevel = int(l)
		} else {
			logLevel = levelTrace
		}
	}
	return int(level) >= logLevel
}

func logAt(level uint32, msg string) {
	hostLog(level, unsafe.StringData(msg), uint32(len(msg)))
}

// logIf logs msg at level if the host's log level lets it through.
func logIf(level uint32, msg string) {
	if enabled(level) {
		logAt(level, msg)
	}
}

// LogDebug logs msg at debug level.
func LogDebug(msg string) { logIf(levelDebug, msg) }

// LogInfo logs msg at info level.
func LogInfo(msg string) { logIf(levelInfo, msg) }

// LogWarn logs msg at warn level.
func LogWarn(msg string) { logIf(levelWarn, msg) }

// LogError logs msg at error level.
func LogError(msg string) { logAt(levelError, msg) }

// LogCritical logs msg at critical level.
func LogCritical(msg string) { logAt(levelCritical, msg) }
