package wasmhost

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSharedDataCASRules(t *testing.T) {
	s := NewSharedData()
	_, _, st := s.Get("vm", "k")
	assert.Equal(t, StatusNotFound, st, "missing key")

	assert.Equal(t, StatusOK, s.Set("vm", "k", []byte("a"), 777), "an absent key is written whatever the cas")
	v, cas1, st := s.Get("vm", "k")
	require.Equal(t, StatusOK, st)
	assert.Equal(t, "a", string(v))
	assert.EqualValues(t, 1, cas1, "cas numbers start at 1")

	assert.Equal(t, StatusCasMismatch, s.Set("vm", "k", []byte("b"), cas1+1))
	assert.Equal(t, StatusOK, s.Set("vm", "k", []byte("b"), cas1))
	_, cas2, _ := s.Get("vm", "k")
	assert.Greater(t, cas2, cas1)
	assert.Equal(t, StatusCasMismatch, s.Set("vm", "k", []byte("c"), cas1), "stale cas")
	assert.Equal(t, StatusOK, s.Set("vm", "k", []byte("c"), 0), "cas 0 is unconditional")
	v, _, _ = s.Get("vm", "k")
	assert.Equal(t, "c", string(v))

	// vm_id namespaces are separate; the cas counter is global.
	_, _, st = s.Get("other", "k")
	assert.Equal(t, StatusNotFound, st)
	require.Equal(t, StatusOK, s.Set("other", "k", nil, 0))
	_, cas3, _ := s.Get("other", "k")
	assert.Greater(t, cas3, cas2)
	assert.Equal(t, []string{"k"}, s.Keys("vm"))

	// Values are copies.
	buf := []byte("x")
	s.Set("vm", "copy", buf, 0)
	buf[0] = 'y'
	v, _, _ = s.Get("vm", "copy")
	v[0] = 'z'
	v2, _, _ := s.Get("vm", "copy")
	assert.Equal(t, "x", string(v2))
}

func TestSharedDataConcurrentCAS(t *testing.T) {
	s := NewSharedData()
	s.Set("vm", "n", []byte{0}, 0)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				for {
					v, cas, _ := s.Get("vm", "n")
					n := binary.LittleEndian.Uint32(append(v, 0, 0, 0, 0)[:4])
					var out [4]byte
					binary.LittleEndian.PutUint32(out[:], n+1)
					if s.Set("vm", "n", out[:], cas) == StatusOK {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	v, _, _ := s.Get("vm", "n")
	assert.EqualValues(t, 4000, binary.LittleEndian.Uint32(v))
}

// A Host without Options.SharedData writes to the process-wide store, as every plugin of one
// Envoy process shares one store; one with a store of its own does not.
func TestProcessSharedDataIsDefault(t *testing.T) {
	const vmID = "process-shared-data-test"
	t.Cleanup(func() { ProcessSharedData().Reset(vmID) })
	ctx := context.Background()
	h, err := New(ctx, buildWasm(nil, minimalFuncs()), Options{VMID: vmID})
	require.NoError(t, err)
	defer h.Close(ctx)
	require.Same(t, ProcessSharedData(), h.SharedData())
	require.Equal(t, StatusOK, h.SetSharedData("k", []byte("v"), 0))
	v, _, st := ProcessSharedData().Get(vmID, "k")
	require.Equal(t, StatusOK, st)
	assert.Equal(t, "v", string(v))

	own := newTestHost(t, buildWasm(nil, minimalFuncs()), Options{VMID: vmID})
	_, _, st = own.GetSharedData("k")
	assert.Equal(t, StatusNotFound, st, "a Host with its own store does not see the process-wide one")
}

func TestPairsRoundTrip(t *testing.T) {
	pairs := [][2]string{{":status", "200"}, {"a", ""}, {"", "b"}, {"k", "v\x01w"}}
	b := EncodePairs(pairs)
	assert.Equal(t, pairsSize(pairs), len(b))
	got, ok := DecodePairs(b)
	require.True(t, ok)
	assert.Equal(t, pairs, got)
	// Layout: count, then sizes, then NUL-terminated strings, little-endian.
	assert.Equal(t, []byte{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'k', 0, 'v', 0}, EncodePairs([][2]string{{"k", "v"}}))
	empty, ok := DecodePairs(EncodePairs(nil))
	assert.True(t, ok)
	assert.Empty(t, empty)
}

func TestPairsMalformedAreEmpty(t *testing.T) {
	good := EncodePairs([][2]string{{"k", "v"}})
	cases := map[string][]byte{
		"nil":             nil,
		"short":           {1, 0},
		"count too large": {9, 0, 0, 0},
		"missing NUL":     append(append([]byte(nil), good[:len(good)-1]...), 'x'),
		"trailing bytes":  append(append([]byte(nil), good...), 0),
		"truncated":       good[:len(good)-2],
	}
	for name, b := range cases {
		got, ok := DecodePairs(b)
		assert.False(t, ok, name)
		assert.Empty(t, got, name)
	}
	var many [][2]string
	for i := 0; i < maxPairsCount+1; i++ {
		many = append(many, [2]string{"k", "v"})
	}
	_, ok := DecodePairs(EncodePairs(many))
	assert.False(t, ok, "more than 1024 pairs is treated as empty")
	_, ok = DecodePairs(EncodePairs(many[:maxPairsCount]))
	assert.True(t, ok)
	_, ok = DecodePairs(EncodePairs([][2]string{{"big", strings.Repeat("x", maxPairsBytes)}}))
	assert.False(t, ok, "more than 1 MiB is treated as empty")
}

func TestHeaderMapEnvoyRules(t *testing.T) {
	m := newHeaderMap([][2]string{{"X-A", "1"}, {":path", "/"}})
	assert.Equal(t, [][2]string{{":path", "/"}, {"x-a", "1"}}, m.kv, "lower-cased, pseudo-headers first")
	m.add(":status", "200")
	m.add("x-a", "2")
	assert.Equal(t, [][2]string{{":path", "/"}, {":status", "200"}, {"x-a", "1"}, {"x-a", "2"}}, m.kv)
	v, _ := m.get("X-A")
	assert.Equal(t, "1", v, "get returns the first value")
	m.replace("x-a", "3")
	assert.Equal(t, [][2]string{{":path", "/"}, {":status", "200"}, {"x-a", "3"}}, m.kv)
	assert.EqualValues(t, len(":path/:status200x-a3"), m.byteSize())
	m.remove("X-A")
	_, ok := m.get("x-a")
	assert.False(t, ok)
}

func TestMetricsRegistry(t *testing.T) {
	m := newMetrics()
	c, st := m.define(MetricCounter, "c")
	require.Equal(t, StatusOK, st)
	c2, _ := m.define(MetricCounter, "c")
	assert.Equal(t, c, c2, "same name and type, same id")
	g, _ := m.define(MetricGauge, "c")
	assert.NotEqual(t, c, g)
	assert.EqualValues(t, MetricGauge, g&metricTypeMask)
	_, st = m.define(3, "bad")
	assert.Equal(t, StatusBadArgument, st)
	assert.Equal(t, StatusBadArgument, m.increment(c, 0))
	assert.Equal(t, StatusOK, m.increment(c, 5))
	assert.Equal(t, StatusOK, m.record(c, 5), "record adds to a counter")
	v, _ := m.get(c)
	assert.EqualValues(t, 10, v)
	assert.Equal(t, StatusOK, m.increment(g, -3))
	v, _ = m.get(g)
	assert.EqualValues(t, -3, int64(v))
	h, _ := m.define(MetricHistogram, "h")
	assert.Equal(t, StatusBadArgument, m.increment(h, 1))
	_, st = m.get(h)
	assert.Equal(t, StatusBadArgument, st)
	assert.Equal(t, StatusNotFound, m.record(h+metricIDIncrement*10, 1))
}
