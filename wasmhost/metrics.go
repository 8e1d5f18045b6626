package wasmhost

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
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

	hmu     sync.Mutex
	hist    HistogramSnapshot
	buckets [len(HistogramBuckets)]uint64 // samples <= each bound (not cumulative)
}

// HistogramBuckets are the upper bounds of the buckets a histogram is exported with: Envoy's
// default histogram buckets, which its Prometheus output uses unless the bootstrap's
// stats_config says otherwise.
var HistogramBuckets = [...]float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
	10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// HistogramSnapshot is what a histogram metric recorded: count, sum, min, max,
// the first 65536 samples in recording order, and the cumulative bucket counts.
type HistogramSnapshot struct {
	Count  uint64   // samples recorded
	Sum    uint64   // their sum
	Min    uint64   // the smallest sample (0 when there is none)
	Max    uint64   // the largest sample
	Values []uint64 // the first 65536 samples, in recording order
	// Buckets[i] counts the samples <= HistogramBuckets[i] (cumulative, as in Prometheus);
	// Count is the +Inf bucket.
	Buckets []uint64
}

// metrics is the registry of one Host. Stats are process-wide in Envoy (every
// worker VM increments the same counter), so every VM of a Host shares it and
// defining the same name and type again yields the same id.
type metrics struct {
	mu     sync.Mutex
	byName map[string]*metric // by metricKey
	byID   atomic.Pointer[[]*metric]
}

func newMetrics() *metrics {
	m := &metrics{byName: make(map[string]*metric)}
	empty := []*metric{}
	m.byID.Store(&empty)
	return m
}

// metricKey names a metric in byName: Envoy keeps a name defined with two types as two
// stats, so the type is part of the key.
func metricKey(typ uint32, name string) string { return string(rune('0'+typ)) + "\x00" + name }

func (m *metrics) define(typ uint32, name string) (uint32, Status) {
	if typ > MetricHistogram {
		return 0, StatusBadArgument
	}
	key := metricKey(typ, name)
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
		if i := sort.SearchFloat64s(HistogramBuckets[:], float64(value)); i < len(mt.buckets) {
			mt.buckets[i]++
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
		if mt, ok := m.byName[metricKey(t, name)]; ok {
			return mt
		}
	}
	return nil
}

// MetricInfo describes one defined metric.
type MetricInfo struct {
	Name  string // as the guest defined it
	Type  int    // MetricCounter, MetricGauge or MetricHistogram
	Value int64  // a counter's or gauge's value; 0 for a histogram (see Histogram)
}

func (m *metrics) list() []MetricInfo {
	all := *m.byID.Load()
	out := make([]MetricInfo, 0, len(all))
	for _, mt := range all {
		out = append(out, MetricInfo{Name: mt.name, Type: int(mt.typ), Value: mt.value.Load()})
	}
	return out
}

// snapshot copies a histogram's state.
func (mt *metric) snapshot() HistogramSnapshot {
	mt.hmu.Lock()
	defer mt.hmu.Unlock()
	s := mt.hist
	s.Values = append([]uint64(nil), s.Values...)
	if s.Count == 0 {
		s.Min = 0
	}
	s.Buckets = make([]uint64, len(mt.buckets))
	var cum uint64
	for i, n := range mt.buckets {
		cum += n
		s.Buckets[i] = cum
	}
	return s
}

// metricsOf returns the registry of a store, or a new one for nil.
func metricsOf(s *MetricStore) *metrics {
	if s == nil {
		return newMetrics()
	}
	return s.m
}

// MetricStore is a registry of metrics: Envoy's stats store. In Envoy it is process-wide, so
// every plugin (and every worker VM) that defines the same name and type updates the same stat.
// A Host has a store of its own unless Options.MetricStore gives it one; give the Hosts that
// model one Envoy process (several listeners, each with its filter) the same store.
type MetricStore struct {
	m    *metrics
	tags atomic.Pointer[[]TagSpecifier] // stats_config.stats_tags (see SetStatsTags)
}

// NewMetricStore returns an empty store.
func NewMetricStore() *MetricStore { return &MetricStore{m: newMetrics()} }

// Metrics lists every defined metric in definition order.
func (s *MetricStore) Metrics() []MetricInfo { return s.m.list() }

// Metric returns the value of the counter or gauge defined under name (a histogram yields
// its sample count).
func (s *MetricStore) Metric(name string) (value int64, ok bool) {
	mt := s.m.find(name, MetricCounter, MetricGauge, MetricHistogram)
	if mt == nil {
		return 0, false
	}
	if mt.typ == MetricHistogram {
		mt.hmu.Lock()
		defer mt.hmu.Unlock()
		return int64(mt.hist.Count), true
	}
	return mt.value.Load(), true
}

// Histogram returns what the histogram metric name recorded.
func (s *MetricStore) Histogram(name string) (HistogramSnapshot, bool) {
	mt := s.m.find(name, MetricHistogram)
	if mt == nil {
		return HistogramSnapshot{}, false
	}
	return mt.snapshot(), true
}

// WritePrometheus writes every metric in the Prometheus text format the way Envoy's admin
// /stats/prometheus does for the stats a Wasm plugin defines: the wasmcustom namespace
// stripped, tags extracted by the store's stats_tags (see SetStatsTags) and written as labels,
// one family per tag-extracted name, sorted by name, with a # TYPE line; a stat without tags
// carries an empty label set ("name{} 5"); histograms get cumulative buckets on Envoy's
// default bounds, then _sum and _count. Two deviations: Envoy refreshes histograms at each
// stats flush (every 5 s by default) while these are current, and a name defined with two
// types (which Envoy keeps apart internally) is written once per type.
func (s *MetricStore) WritePrometheus(w io.Writer) error {
	all := *s.m.byID.Load()
	var tags []TagSpecifier
	if t := s.tags.Load(); t != nil {
		tags = *t
	}
	bw := bufio.NewWriter(w)
	for _, f := range families(all, tags) {
		switch f.typ {
		case MetricCounter, MetricGauge:
			typ := "counter"
			if f.typ == MetricGauge {
				typ = "gauge"
			}
			fmt.Fprintf(bw, "# TYPE %s %s\n", f.name, typ)
			for _, fm := range f.members {
				fmt.Fprintf(bw, "%s%s %d\n", f.name, formatLabels(fm.labels), fm.m.value.Load())
			}
		case MetricHistogram:
			fmt.Fprintf(bw, "# TYPE %s histogram\n", f.name)
			for _, fm := range f.members {
				h := fm.m.snapshot()
				for i, b := range HistogramBuckets {
					fmt.Fprintf(bw, "%s_bucket%s %d\n", f.name,
						formatLabels(fm.labels, "le", strconv.FormatFloat(b, 'f', -1, 64)), h.Buckets[i])
				}
				ls := formatLabels(fm.labels)
				fmt.Fprintf(bw, "%s_bucket%s %d\n%s_sum%s %d\n%s_count%s %d\n",
					f.name, formatLabels(fm.labels, "le", "+Inf"), h.Count, f.name, ls, h.Sum, f.name, ls, h.Count)
			}
		}
	}
	return bw.Flush()
}
