//go:build wasip1

package abi

// The host functions this module imports, all registered by Envoy's proxy-wasm host for ABI
// 0.2.1: Envoy refuses to load a module that imports a function it does not provide, such as
// the 0.1.0-only proxy_get_configuration. Guest addresses are 32-bit, so every out-pointer the
// host writes an address or a size into is a *uint32.

//go:wasmimport env proxy_log
func hostLog(level uint32, msg *byte, size uint32) uint32

//go:wasmimport env proxy_get_log_level
func hostGetLogLevel(level *uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func hostGetBufferBytes(bufferType, start, maxSize uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func hostGetHeaderMapPairs(mapType uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func hostGetHeaderMapValue(mapType uint32, key *byte, keySize uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func hostAddHeaderMapValue(mapType uint32, key *byte, keySize uint32, value *byte, valueSize uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func hostRemoveHeaderMapValue(mapType uint32, key *byte, keySize uint32) uint32

//go:wasmimport env proxy_get_property
func hostGetProperty(path *byte, pathSize uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_set_property
func hostSetProperty(path *byte, pathSize uint32, value *byte, valueSize uint32) uint32

//go:wasmimport env proxy_get_shared_data
func hostGetSharedData(key *byte, keySize uint32, retData *uint32, retSize *uint32, cas *uint32) uint32

//go:wasmimport env proxy_set_shared_data
func hostSetSharedData(key *byte, keySize uint32, value *byte, valueSize uint32, cas uint32) uint32

//go:wasmimport env proxy_http_call
func hostHTTPCall(cluster *byte, clusterSize uint32, headers *byte, headersSize uint32, body *byte, bodySize uint32,
	trailers *byte, trailersSize uint32, timeoutMillis uint32, token *uint32) uint32

//go:wasmimport env proxy_send_local_response
func hostSendLocalResponse(status uint32, details *byte, detailsSize uint32, body *byte, bodySize uint32,
	headers *byte, headersSize uint32, grpcStatus int32) uint32

//go:wasmimport env proxy_continue_stream
func hostContinueStream(streamType uint32) uint32

//go:wasmimport env proxy_set_effective_context
func hostSetEffectiveContext(contextID uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func hostSetTickPeriod(millis uint32) uint32

//go:wasmimport env proxy_define_metric
func hostDefineMetric(metricType uint32, name *byte, nameSize uint32, id *uint32) uint32

//go:wasmimport env proxy_increment_metric
func hostIncrementMetric(id uint32, offset int64) uint32

//go:wasmimport env proxy_record_metric
func hostRecordMetric(id uint32, value uint64) uint32

// The WASI clock, which the Go runtime imports as well. time.Now asks it twice (the wall
// clock and the monotonic clock); WallClockNanos asks once. The host writes the time and never
// calls back into the guest meanwhile, so the result may live on the stack (noescape).
//
//go:wasmimport wasi_snapshot_preview1 clock_time_get
//go:noescape
func wasiClockTimeGet(clockID uint32, precision uint64, time *uint64) uint32
