package filter

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/stretchr/testify/require"
)

// A configuration change never hands a client allowance it did not have: each row exhausts
// (or uses) a key under one rule, then asks under the changed rule, natively and against the
// compiled module, on the same shared data. The rows are the ones that granted allowance
// before states recorded their parameters (token-bucket units depended on gcd(limit, window),
// and a GCRA or meter state was read under the new emission interval).
func TestConfigChangeNeverGrantsAllowance(t *testing.T) {
	rule := func(algo string) string {
		return fmt.Sprintf(`{"rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],%s}]}`, algo)
	}
	rows := []struct {
		name          string
		before, after string
		used          int // -1: until denied
		want          int // allowed next, a minute later
	}{
		{"token_bucket 11/h used 10 -> 10/h", `"algorithm":"token_bucket","limit":11,"window":"1h"`, `"algorithm":"token_bucket","limit":10,"window":"1h"`, 10, 1},
		{"token_bucket 10/h used 5 -> 10/30m", `"algorithm":"token_bucket","limit":10,"window":"1h"`, `"algorithm":"token_bucket","limit":10,"window":"30m"`, 5, 5},
		{"gcra 10/1h all -> 10/2h", `"algorithm":"gcra","limit":10,"window":"1h"`, `"algorithm":"gcra","limit":10,"window":"2h"`, -1, 0},
		{"leaky_bucket 10/1h all -> 10/2h", `"algorithm":"leaky_bucket","limit":10,"window":"1h"`, `"algorithm":"leaky_bucket","limit":10,"window":"2h"`, -1, 0},
		{"gcra 10/1h all -> 5/2h", `"algorithm":"gcra","limit":10,"window":"1h"`, `"algorithm":"gcra","limit":5,"window":"2h"`, -1, 0},
		{"fixed_window 10/1h all -> token_bucket 10/1h", `"algorithm":"fixed_window","limit":10,"window":"1h"`, `"algorithm":"token_bucket","limit":10,"window":"1h"`, -1, 0},
		{"sliding log 10/1h all -> gcra 20/1h", `"algorithm":"sliding_window","variant":"log","limit":10,"window":"1h"`, `"algorithm":"gcra","limit":20,"window":"1h"`, -1, 0},
	}
	use := func(t *testing.T, d driver, used int) {
		for i := 0; used < 0 || i < used; i++ {
			if d.do(t, t0, xk("client")).status != 0 {
				require.Negative(t, used, "request %d of %d denied", i, used)
				return
			}
			require.Less(t, i, 100, "never denied")
		}
	}
	next := func(t *testing.T, d driver) int {
		allowed := 0
		for range 20 {
			if d.do(t, t0.Add(time.Minute), xk("client")).status == 0 {
				allowed++
			}
		}
		return allowed
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Run("native", func(t *testing.T) {
				store := sharedstate.NewMemory()
				d := newNativeWithStore(t, rule(row.before), store)
				use(t, d, row.used)
				stop(d)
				d = newNativeWithStore(t, rule(row.after), store)
				defer stop(d)
				require.Equal(t, row.want, next(t, d))
			})
			t.Run("wasm", func(t *testing.T) {
				shared := wasmhost.NewSharedData()
				use(t, newWasm(t, rule(row.before), wasmOptions{shared: shared}), row.used)
				require.Equal(t, row.want, next(t, newWasm(t, rule(row.after), wasmOptions{shared: shared})))
			})
		})
	}
}
