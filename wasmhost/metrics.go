package wasmhost

import (
	"math"
	"sync"
	"sync/atomic"
)

// Envoy encodes the metric type in the low two bits of a metric id
// (kMetricTypeMask) and hands out ids in steps of four.
const (
	metricTypeMask      = 0x3
	metricIDIncrement   = 0x4
	maxHistogramSamples = 1 << 16
)

// metric is one Envoy stat. Counters and gauges are atomics so that the VM
// loops never contend on the registry lock on the hot path.
type metric struct {
	id    uint32
	typ   uint32
	name  string
	value atomic.Int64

	hmu  sync.Mutex
	hist HistogramSnapshot
}

// HistogramSnapshot is what a histogram metric recorded: count, sum, min, max
// and the first 65536 samples in recording order.
type HistogramSnapshot struct {
	Count  uint64
	Sum    uint64
	Min    uint64
	Max    uint64
	Values []uint64
}

// metrics is the registry of one Host. Stats are process-wide in Envoy (every
// worker VM increments the same counter), so every VM of a Host shares it and
// defining the same name and type again yields the same id.
type metrics struct {
	mu     sync.Mutex
	byName map[string]*metric // key: type + "\x00" + name
	byID   atomic.Pointer[[]*metric]
}

func newMetrics() *metrics {
	m := &metrics{byName: make(map[string]*metric)}
	empty := []*metric{}
	m.byID.Store(&empty)
	return m
}

func (m *metrics) define(typ uint32, name string) (uint32, Status) {
	if typ > MetricHistogram {
		return 0, StatusBadArgument
	}
	key := string(rune('0'+typ)) + "\x00" + name
	m.mu.Lock()
	defer m.mu.Unlock()
	if mt, ok := m.byName[key]; ok {
		return mt.id, StatusOK
	}
	old := *m.byID.Load()
	id := uint32(len(old)+1)*metricIDIncrement | typ
	mt := &metric{id: id, typ: typ, name: name, hist: HistogramSnapshot{Min: math.MaxUint64}}
	m.byName[key] = mt
	next := make([]*metric, len(old)+1)
	copy(next, old)
	next[len(old)] = mt
	m.byID.Store(&next)
	return id, StatusOK
}

func (m *metrics) lookup(id uint32) *metric {
	all := *m.byID.Load()
	i := int(id/metricIDIncrement) - 1
	if i < 0 || i >= len(all) || all[i].id != id {
		return nil
	}
	return all[i]
}

// increment follows Envoy's Context::incrementMetric: counters only go up
// (offset <= 0 is BadArgument), gauges add or subtract, histograms cannot be
// incremented.
func (m *metrics) increment(id uint32, offset int64) Status {
	typ := id & metricTypeMask
	if typ == MetricHistogram || typ > MetricHistogram {
		return StatusBadArgument
	}
	mt := m.lookup(id)
	if mt == nil {
		return StatusNotFound
	}
	if typ == MetricCounter && offset <= 0 {
		return StatusBadArgument
	}
	mt.value.Add(offset)
	return StatusOK
}

// record follows Envoy's Context::recordMetric: a counter adds, a gauge is
// set, a histogram records a sample.
func (m *metrics) record(id uint32, value uint64) Status {
	mt := m.lookup(id)
	if mt == nil {
		return StatusNotFound
	}
	switch mt.typ {
	case MetricCounter:
		mt.value.Add(int64(value))
	case MetricGauge:
		mt.value.Store(int64(value))
	default:
		mt.hmu.Lock()
		h := &mt.hist
		h.Count++
		h.Sum += value
		h.Min = min(h.Min, value)
		h.Max = max(h.Max, value)
		if len(h.Values) < maxHistogramSamples {
			h.Values = append(h.Values, value)
		}
		mt.hmu.Unlock()
	}
	return StatusOK
}

// get follows Envoy's Context::getMetric: histograms cannot be read.
func (m *metrics) get(id uint32) (uint64, Status) {
	typ := id & metricTypeMask
	if typ != MetricCounter && typ != MetricGauge {
		return 0, StatusBadArgument
	}
	mt := m.lookup(id)
	if mt == nil {
		return 0, StatusNotFound
	}
	return uint64(mt.value.Load()), StatusOK
}

func (m *metrics) find(name string, types ...uint32) *metric {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range types {
		if mt, ok := m.byName[string(rune('0'+t))+"\x00"+name]; ok {
			return mt
		}
	}
	return nil
}

// MetricInfo describes one defined metric.
type MetricInfo struct {
	Name  string
	Type  int // MetricCounter, MetricGauge or MetricHistogram
	Value int64
}

func (m *metrics) list() []MetricInfo {
	all := *m.byID.Load()
	out := make([]MetricInfo, 0, len(all))
	for _, mt := range all {
		out = append(out, MetricInfo{Name: mt.name, Type: int(mt.typ), Value: mt.value.Load()})
	}
	return out
}
