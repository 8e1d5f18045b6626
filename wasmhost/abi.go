package wasmhost

// Status is a proxy-wasm WasmResult code returned by host functions.
type Status uint32

// The proxy-wasm status codes Envoy returns from host functions (ABI 0.2.1).
const (
	StatusOK                   Status = 0
	StatusNotFound             Status = 1
	StatusBadArgument          Status = 2
	StatusSerializationFailure Status = 3
	StatusParseFailure         Status = 4
	StatusInvalidMemoryAccess  Status = 6
	StatusEmpty                Status = 7
	StatusCasMismatch          Status = 8
	StatusInternalFailure      Status = 10
	StatusBrokenConnection     Status = 11
	StatusUnimplemented        Status = 12
)

// Header map types of the proxy-wasm ABI.
const (
	MapRequestHeaders          = 0
	MapRequestTrailers         = 1
	MapResponseHeaders         = 2
	MapResponseTrailers        = 3
	MapGrpcInitialMetadata     = 4
	MapGrpcTrailingMetadata    = 5
	MapHTTPCallResponseHeaders = 6
	MapHTTPCallResponseTrailer = 7
	mapTypeMax                 = 7
)

// Buffer types of the proxy-wasm ABI.
const (
	BufferRequestBody          = 0
	BufferResponseBody         = 1
	BufferDownstreamData       = 2
	BufferUpstreamData         = 3
	BufferHTTPCallResponseBody = 4
	BufferGrpcReceive          = 5
	BufferVMConfiguration      = 6
	BufferPluginConfiguration  = 7
	BufferCallData             = 8
	bufferTypeMax              = 8
)

// Metric types accepted by proxy_define_metric.
const (
	MetricCounter   = 0
	MetricGauge     = 1
	MetricHistogram = 2
)

// Stream types accepted by proxy_continue_stream and proxy_close_stream.
const (
	streamRequest    = 0
	streamResponse   = 1
	streamDownstream = 2
	streamUpstream   = 3
)

// WASI errno values used by the WASI functions Envoy provides.
const (
	errnoSuccess  = 0
	errnoBadf     = 8
	errnoFault    = 21
	errnoInval    = 28
	errnoNoent    = 44
	errnoNosys    = 52
	errnoNotsup   = 58
	wasiRandomMax = 64 * 1024
)

// LogLevel is a proxy-wasm (spdlog) log level. The zero value means "not set"
// so that Options can default to Envoy's default level, info.
type LogLevel int

// Log levels. Their ABI values (as seen by proxy_log and proxy_get_log_level)
// are Trace=0 ... Critical=5; the Go constants are shifted by one so that the
// zero value of Options.LogLevel can mean "Envoy's default (info)".
const (
	LogTrace LogLevel = iota + 1
	LogDebug
	LogInfo
	LogWarn
	LogError
	LogCritical
)

// abi returns the level as the guest sees it (spdlog numbering).
func (l LogLevel) abi() uint32 { return uint32(l - 1) }

// String returns the spdlog name of the level.
func (l LogLevel) String() string {
	switch l {
	case LogTrace:
		return "trace"
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warn"
	case LogError:
		return "error"
	case LogCritical:
		return "critical"
	}
	return "unknown"
}

// levelFromABI converts a guest log level to a LogLevel.
func levelFromABI(l uint32) LogLevel { return LogLevel(l + 1) }

// ParseLogLevel parses an spdlog level name ("trace" ... "critical").
func ParseLogLevel(s string) (LogLevel, bool) {
	for l := LogTrace; l <= LogCritical; l++ {
		if l.String() == s {
			return l, true
		}
	}
	if s == "warning" {
		return LogWarn, true
	}
	return 0, false
}

// PollOneoffMode selects how wasi poll_oneoff behaves, because Envoy changed
// it in 1.39 and the Go runtime depends on it when it sleeps.
type PollOneoffMode int

const (
	// PollOneoffEnvoy139 (the default) reproduces Envoy >= 1.39: poll_oneoff
	// returns success with zero events, so the Go scheduler spins until its
	// timer expires instead of crashing.
	PollOneoffEnvoy139 PollOneoffMode = iota
	// PollOneoffEnvoy138 reproduces Envoy <= 1.38: poll_oneoff returns ENOSYS
	// (52), which the Go runtime treats as a fatal error (golang/go#78513).
	PollOneoffEnvoy138
)

// String names the mode.
func (m PollOneoffMode) String() string {
	if m == PollOneoffEnvoy138 {
		return "envoy<=1.38(ENOSYS)"
	}
	return "envoy>=1.39(0 events)"
}
