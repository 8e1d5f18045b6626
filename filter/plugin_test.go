package filter

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/stretchr/testify/require"
)

// Every limiter the algorithms package builds converts to a table's limiter through
// staticTableLimiter's switch on concrete types, not through the runtime's itab construction
// (see tableLimiter): an algorithm added without a case here fails this test.
func TestTableLimiterStatic(t *testing.T) {
	configs := []algorithms.Config{
		{Algorithm: algorithms.AlgTokenBucket, Limit: 10, Window: time.Second},
		{Algorithm: algorithms.AlgLeakyBucket, Limit: 10, Window: time.Second},
		{Algorithm: algorithms.AlgSlidingWindow, Variant: algorithms.VariantCounter, Limit: 10, Window: time.Second},
		{Algorithm: algorithms.AlgSlidingWindow, Variant: algorithms.VariantLog, Limit: 10, Window: time.Second},
		{Algorithm: algorithms.AlgFixedWindow, Limit: 10, Window: time.Second},
		{Algorithm: algorithms.AlgGCRA, Limit: 10, Window: time.Second},
		{Algorithm: algorithms.AlgAdaptive, Limit: 10, MinLimit: 1, Window: time.Second, ErrorThreshold: 0.1},
	}
	covered := map[string]bool{}
	for _, c := range configs {
		lim, err := algorithms.New(c)
		require.NoError(t, err, c.Algorithm)
		got := staticTableLimiter(lim)
		require.NotNil(t, got, "%s %s: no case in staticTableLimiter", c.Algorithm, c.Variant)
		require.True(t, got == lim.(any), "%s: converted to another value", c.Algorithm)
		require.True(t, tableLimiter(lim) == lim.(any))
		covered[c.Algorithm] = true
	}
	for _, s := range algorithms.Specs() {
		require.True(t, covered[s.Name], "algorithm %s is not in this test", s.Name)
	}
	// Any other limiter still converts, the ordinary way.
	other := otherLimiter{}
	require.Nil(t, staticTableLimiter(other))
	require.Equal(t, other, tableLimiter(other))
}

// otherLimiter is a limiter from outside package algorithms.
type otherLimiter struct{}

func (otherLimiter) AllowN([]byte, int64, int64) (algorithms.Decision, []byte) {
	return algorithms.Decision{Allowed: true}, nil
}
func (otherLimiter) StateSize() int          { return 0 }
func (otherLimiter) Idle([]byte, int64) bool { return true }

// configure leaves a stream context and a decision set sized to the rules in the pools the
// first request takes them from (see warm), so that the first request allocates neither; a
// second configure of the same VM adds none.
func TestWarmPoolsServeFirstRequest(t *testing.T) {
	cfg := `{"rules":[{"name":"a","algorithm":"token_bucket","limit":10,"window":"1s"},` +
		`{"name":"b","key":[{"source":"header","name":"X-Tenant"}],"algorithm":"gcra","limit":10,"window":"1s"}]}`
	l := newLeaseVMs(t, cfg, 1)
	p := l.vms[0]
	require.Len(t, p.contexts, 1)
	require.Len(t, p.free, 1)
	require.Equal(t, 2, cap(p.free[0].applied))
	require.Equal(t, 2, cap(p.matched))
	warmCtx, warmSet := p.contexts[0], p.free[0]

	h := p.NewHttpContext(7).(*httpContext)
	require.Same(t, warmCtx, h, "the first stream takes the warm context")
	require.Same(t, p, h.plugin)
	require.Equal(t, uint32(7), h.id)
	require.Same(t, warmSet, p.takeDecisions(), "and the warm decision set")

	require.NoError(t, p.configure([]byte(cfg)))
	require.Len(t, p.contexts, 1, "a reconfigure fills an empty pool once")
}

// Warming is for the tables that will see the first requests, the rules' own: the tables of
// overrides, one per override, may never see one (a rarely seen tenant), and warming each
// would cost its slot name cache (about 6 KiB) in every VM at every configure. 64 rules with
// 64 overrides each: the configured VM holds well under what 4,096 warmed caches would take
// (about 25 MiB; measured live, 32.5 MiB with every table warmed, 6.6 MiB with none).
func TestWarmLeavesOverrideTablesCold(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"max_keys":1,"rules":[`)
	for i := range 64 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"name":"r` + strconv.Itoa(i) + `","key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":10,"window":"1m","overrides":[`)
		for j := range 64 {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString(`{"exact":"v` + strconv.Itoa(j) + `","limit":` + strconv.Itoa(j+1) + `}`)
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := newLeaseVMs(t, b.String(), 1)
	runtime.GC()
	runtime.ReadMemStats(&after)
	live := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("live heap after configuring 64 rules x 64 overrides: %.1f MiB", float64(live)/(1<<20))
	require.Less(t, live, int64(16<<20), "the overrides' tables were warmed")
	require.Len(t, l.vms, 1)
}

// TestConfiguredLog checks the info line a successful configuration logs.
func TestConfiguredLog(t *testing.T) {
	d := newNative(t, `{"rules":[`+
		`{"name":"a","algorithm":"fixed_window","limit":3,"window":"1h"},`+
		`{"name":"b","algorithm":"token_bucket","limit":3,"window":"1s"}]}`)
	require.Contains(t, d.host.GetInfoLogs(), "ratelimit: configured 2 rules")
}
