package moduletest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// The key table's promises through the whole filter against the compiled module; package
// filter runs filtertest.TableCases natively.

type wasmTableDriver struct{ *wasmDriver }

// Metric reads a counter or gauge of the filter (filtertest.TableDriver).
func (d wasmTableDriver) Metric(t *testing.T, name string) int64 {
	v, _ := d.host.Metric(name)
	return v
}

func TestKeyTable(t *testing.T) {
	t.Parallel()
	for _, c := range filtertest.TableCases {
		t.Run(c.Name, func(t *testing.T) {
			d := newWasm(t, c.Config, wasmOptions{workers: c.Workers})
			c.Check(t, wasmTableDriver{d})
			require.Zero(t, d.host.Stats().Traps)
		})
	}
}

// A max_keys change keeps each client's consumed allowance (exhausted, then max_keys 10000 ->
// 5000: 0 of the next 5 allowed), for token_bucket, fixed_window and the
// sliding log; old and new configurations run side by side on one shared store, as Envoy
// runs old and new VMs during an update.
func TestKeyTableMaxKeysChange(t *testing.T) {
	t.Parallel()
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
	check := func(t *testing.T, before, after driver) {
		exhaust(t, before)
		require.Zero(t, before.Do(t, t0, filtertest.XK("other")).Status)
		denyAll(t, after, "after the change")
		denyAll(t, before, "old VM after the change")
		// The other client has exactly its 4 left, wherever it is counted.
		allowed := 0
		for i := range 8 {
			d := after
			if i%2 == 1 {
				d = before
			}
			if d.Do(t, t0.Add(2*time.Second), filtertest.XK("other")).Status == 0 {
				allowed++
			}
		}
		require.Equal(t, 4, allowed)
	}
	for name, algo := range algos {
		t.Run(name, func(t *testing.T) {
			shared := wasmhost.NewSharedData()
			before := newWasm(t, conf(algo, 10000), wasmOptions{shared: shared})
			after := newWasm(t, conf(algo, 5000), wasmOptions{shared: shared})
			check(t, before, after)
		})
	}
}

// Eight worker VMs of the compiled module on one hot key with the default cas_attempts:
// exactly the limit is admitted, and the share of decisions that exhaust their attempts (and
// are denied) is reported; the README quotes it.
//
//	go test -count=1 -run TestKeyTableContentionWasm -v ./wasmhost/moduletest/
func TestKeyTableContentionWasm(t *testing.T) {
	t.Parallel()
	const limit, requests, parallel = 2000, 8000, 32
	d := newWasm(t, fmt.Sprintf(`{"rules":[{"name":"hot","algorithm":"token_bucket","limit":%d,"window":"1h"}]}`, limit),
		wasmOptions{workers: 8})
	var wg sync.WaitGroup
	var mu sync.Mutex
	status := map[int]int{}
	work := make(chan struct{}, requests)
	for range requests {
		work <- struct{}{}
	}
	close(work)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := d.host.Do(ctx, d.request(step{}))
				cancel()
				if !assertNoErr(t, err) {
					return
				}
				mu.Lock()
				status[outcomeOf(res).Status]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	exhausted, _ := d.host.Metric("ratelimit_cas_exhausted_total;rule=hot")
	retries, _ := d.host.Metric("ratelimit_cas_retries_total;rule=hot")
	allowed, _ := d.host.Metric("ratelimit_requests_total;rule=hot;decision=allowed")
	t.Logf("8 workers, %d requests on one key: %d CAS retries, %d decisions exhausted their attempts (%.3f%%)",
		requests, retries, exhausted, 100*float64(exhausted)/requests)
	require.Equal(t, requests, status[0]+status[429])
	// A denial for contention consumes nothing, and far more requests than the limit arrive:
	// exactly the limit is admitted, never more.
	require.EqualValues(t, limit, allowed)
	require.Equal(t, limit, status[0])
	require.Zero(t, d.host.Stats().Traps)
}

// A chain of max_keys changes, 100 -> 200 -> ... -> 800, keeps an exhausted client exhausted
// in the compiled module: each configuration is asked once (denied, so it writes nothing and
// the key's state stays in an older layout's forward), however many layouts back, the fourth
// and later included.
func TestKeyTableMaxKeysChainWasm(t *testing.T) {
	t.Parallel()
	conf := func(maxKeys int) string {
		return fmt.Sprintf(`{"rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],"max_keys":%d,"algorithm":"fixed_window","limit":5,"window":"1h"}]}`, maxKeys)
	}
	shared := wasmhost.NewSharedData()
	first := newWasm(t, conf(100), wasmOptions{shared: shared})
	for range 5 {
		require.Zero(t, first.Do(t, t0, filtertest.XK("client")).Status)
	}
	for m := 200; m <= 800; m += 100 {
		d := newWasm(t, conf(m), wasmOptions{shared: shared})
		require.Equal(t, 429, d.Do(t, t0.Add(time.Second), filtertest.XK("client")).Status, "max_keys %d", m)
	}
}
