package filter

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/memstore"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/storetest"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The key table's promises through the whole filter under proxytest; wasmhost/moduletest
// checks filtertest.TableCases against the compiled module too.

type nativeTableDriver struct{ *nativeDriver }

// Metric reads a counter or gauge of the filter (filtertest.TableDriver).
func (d nativeTableDriver) Metric(t *testing.T, name string) int64 {
	if v, err := d.host.GetCounterMetric(name); err == nil {
		return int64(v)
	}
	v, _ := d.host.GetGaugeMetric(name)
	return int64(v)
}

func TestKeyTable(t *testing.T) {
	for _, c := range filtertest.TableCases {
		t.Run(c.Name, func(t *testing.T) { c.Check(t, nativeTableDriver{newNative(t, c.Config)}) })
	}
}

// newNativeWithStore starts the filter under the emulator with its local state in store. The
// emulator allows one instance at a time: the previous one must have been stopped (see stop).
func newNativeWithStore(t *testing.T, cfg string, store sharedstate.Store) *nativeDriver {
	t.Helper()
	d := &nativeDriver{now: new(time.Time)}
	*d.now = t0
	opt := proxytest.NewEmulatorOption().
		WithVMContext(NewVMContext(WithClock(func() int64 { return d.now.UnixNano() }), WithStore(store))).
		WithPluginConfiguration([]byte(cfg))
	host, reset := proxytest.NewHostEmulator(opt)
	var once sync.Once
	stops[d] = func() { once.Do(reset) }
	t.Cleanup(stops[d])
	require.Equal(t, types.OnPluginStartStatusOK, host.StartPlugin(), "configure: %v", host.GetCriticalLogs())
	d.host = host
	return d
}

// stops holds how to stop each emulator newNativeWithStore started.
var stops = map[*nativeDriver]func(){}

// stop stops d's emulator so that another one can start.
func stop(d *nativeDriver) { stops[d]() }

// A max_keys change keeps each client's consumed allowance (exhausted, then max_keys 10000 ->
// 5000: 0 of the next 5 allowed), for token_bucket, fixed_window and the
// sliding log; old and new configurations run side by side on one shared store, as Envoy
// runs old and new VMs during an update.
func TestKeyTableMaxKeysChange(t *testing.T) {
	algos := map[string]string{
		"token_bucket":       `"algorithm":"token_bucket","limit":5,"window":"1h"`,
		"fixed_window":       `"algorithm":"fixed_window","limit":5,"window":"1h"`,
		"sliding_window_log": `"algorithm":"sliding_window","variant":"log","limit":5,"window":"1h"`,
	}
	conf := func(algo string, maxKeys int) string {
		return fmt.Sprintf(`{"rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],"max_keys":%d,%s}]}`, maxKeys, algo)
	}
	// Ten exhausted clients: under a plain formula (digest mod max_keys) a key would keep its
	// slot across 10000 -> 5000 only by chance (one in two), so some of them would be reset.
	// wasmhost/moduletest also runs both configurations side by side.
	const clients = 10
	exhaust := func(t *testing.T, d driver) {
		for c := range clients {
			for range 5 {
				require.Zero(t, d.Do(t, t0, filtertest.XK(fmt.Sprintf("client-%d", c))).Status)
			}
		}
	}
	denyAll := func(t *testing.T, d driver, what string) {
		for c := range clients {
			for i := range 5 {
				require.Equal(t, 429, d.Do(t, t0.Add(time.Second), filtertest.XK(fmt.Sprintf("client-%d", c))).Status,
					"%s: client %d, request %d", what, c, i)
			}
		}
	}
	for name, algo := range algos {
		t.Run(name, func(t *testing.T) {
			t.Run("native", func(t *testing.T) {
				store := memstore.New()
				// The emulator allows one instance at a time: the old configuration decides
				// first, then the new one, then the old one again, on the same store.
				before := func() *nativeDriver { return newNativeWithStore(t, conf(algo, 10000), store) }
				d := before()
				exhaust(t, d)
				stop(d)
				d = newNativeWithStore(t, conf(algo, 5000), store)
				denyAll(t, d, "after the change")
				stop(d)
				denyAll(t, before(), "old configuration again")
			})
		})
	}
}

// Losing every compare-and-swap race is contention, not a store failure: with the default
// failure_mode ("allow") the request is still not admitted uncounted: it is denied, with
// Retry-After 1, counted in cas_exhausted_total and not in store_errors_total.
func TestKeyTableContentionNeverAdmitsUncounted(t *testing.T) {
	racing := &storetest.Racing{Store: memstore.New()}
	lose := false
	racing.Lose = func(string) bool { return lose }
	d := newNativeWithStore(t, `{"rules":[{"name":"hot","algorithm":"fixed_window","limit":10,"window":"1h"}]}`, racing)
	m := nativeTableDriver{d}
	require.Zero(t, d.Do(t, t0, step{}).Status)
	lose = true
	o := d.Do(t, t0, step{})
	require.Equal(t, 429, o.Status)
	require.Equal(t, "1", o.Headers["retry-after"])
	require.EqualValues(t, 1, m.Metric(t, "ratelimit_cas_exhausted_total;rule=hot"))
	require.Zero(t, m.Metric(t, "ratelimit_store_errors_total;rule=hot"))
	require.EqualValues(t, 1, m.Metric(t, "ratelimit_requests_total;rule=hot;decision=allowed"))
	// The README's promise: a cas_exhausted denial is also counted as denied.
	require.EqualValues(t, 1, m.Metric(t, "ratelimit_requests_total;rule=hot;decision=denied"))
	require.GreaterOrEqual(t, racing.Lost, 8)
	// A shadow rule never denies: it counts the lost races and lets the request through.
	lose = false
	stop(d)
	d = newNativeWithStore(t, `{"rules":[{"name":"sh","shadow":true,"algorithm":"fixed_window","limit":10,"window":"1h"}]}`, racing)
	m = nativeTableDriver{d}
	require.Zero(t, d.Do(t, t0, step{}).Status)
	lose = true
	require.Zero(t, d.Do(t, t0, step{}).Status)
	require.EqualValues(t, 1, m.Metric(t, "ratelimit_cas_exhausted_total;rule=sh"))
}

// A chain of max_keys changes, 100 -> 200 -> ... -> 800, keeps an exhausted client exhausted:
// each configuration is asked once (denied, so it writes nothing and the key's state stays in
// an older layout's forward), however many layouts back, the fourth and later included.
func TestKeyTableMaxKeysChainNative(t *testing.T) {
	conf := func(maxKeys int) string {
		return fmt.Sprintf(`{"rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],"max_keys":%d,"algorithm":"fixed_window","limit":5,"window":"1h"}]}`, maxKeys)
	}
	store := memstore.New()
	d := newNativeWithStore(t, conf(100), store)
	for range 5 {
		require.Zero(t, d.Do(t, t0, filtertest.XK("client")).Status)
	}
	stop(d)
	for m := 200; m <= 800; m += 100 {
		d := newNativeWithStore(t, conf(m), store)
		require.Equal(t, 429, d.Do(t, t0.Add(time.Second), filtertest.XK("client")).Status, "max_keys %d", m)
		stop(d)
	}
}
