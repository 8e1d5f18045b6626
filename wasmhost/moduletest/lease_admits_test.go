package moduletest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A lease must not deny what the exact decision admits, on the compiled module: one traffic
// pattern runs on worker VMs of a rule with a lease block and of the same rule without, on
// the virtual clock, and the lease admits at least 95% of what the exact decision admits, and
// no more than that plus holders x batch. Package filter runs the same patterns natively for
// every algorithm a lease applies to (TestLeaseAdmitsPacedTraffic, TestLeaseAdmitsTrafficInTurn).

// wasmLeaseTraffic is one pattern: n requests, one every step, request i on worker i % workers.
type wasmLeaseTraffic struct {
	algo           string
	batch, workers int
	n              int
	step           time.Duration
}

// admitted runs tr on a rule named hot with the lease block lease (none when empty).
func (tr wasmLeaseTraffic) admitted(t *testing.T, lease string) int {
	h, clock := virtualHost(t, `{"rules":[{"name":"hot",`+tr.algo+lease+`}]}`, tr.workers, nil)
	admitted := 0
	for i := range tr.n {
		if doWorker(t, h, i%tr.workers) {
			admitted++
		}
		clock.Advance(tr.step)
	}
	return admitted
}

// checkWasmLeaseAdmits compares tr's leased admissions with the exact ones, which do not
// depend on the batch: exact holds them by pattern (tr without its batch), each run once.
func checkWasmLeaseAdmits(t *testing.T, tr wasmLeaseTraffic, exactRuns map[wasmLeaseTraffic]int) {
	pattern := tr
	pattern.batch = 0
	exact, ok := exactRuns[pattern]
	if !ok {
		exact = tr.admitted(t, "")
		exactRuns[pattern] = exact
	}
	leased := tr.admitted(t, fmt.Sprintf(`,"lease":{"batch":%d}`, tr.batch))
	t.Logf("exact %d, leased %d", exact, leased)
	require.GreaterOrEqual(t, leased*100, exact*95, "the lease admits at least 95%% of the exact decision's %d", exact)
	require.LessOrEqual(t, leased, exact+tr.workers*tr.batch, "over-admission beyond holders x batch")
}

// eachWasmLeaseTraffic runs checkWasmLeaseAdmits as a subtest for a token bucket and a fixed
// window at limit per window, every batch and every number of workers: n requests, one every
// step.
func eachWasmLeaseTraffic(t *testing.T, window string, batches, workers []int, n int, step time.Duration) {
	exactRuns := map[wasmLeaseTraffic]int{}
	for _, algo := range []string{"token_bucket", "fixed_window"} {
		for _, batch := range batches {
			for _, w := range workers {
				tr := wasmLeaseTraffic{algo: fmt.Sprintf(`"algorithm":%q,"limit":100,"window":%q`, algo, window),
					batch: batch, workers: w, n: n, step: step}
				t.Run(fmt.Sprintf("%s/batch=%d/workers=%d", algo, batch, w), func(t *testing.T) { checkWasmLeaseAdmits(t, tr, exactRuns) })
			}
		}
	}
}

// TestLeaseAdmitsPacedTrafficWasm: one request every 100 ms for two minutes, limit 100 per
// minute, on 1 and 4 worker VMs, batch 10 and 100.
func TestLeaseAdmitsPacedTrafficWasm(t *testing.T) {
	t.Parallel()
	eachWasmLeaseTraffic(t, "1m", []int{10, 100}, []int{1, 4}, 1200, 100*time.Millisecond)
}

// TestLeaseAdmitsTrafficInTurnWasm: 200 requests in turn over 4 and 8 worker VMs, one every
// 10 ms, limit 100 per hour, batch 50 and 100.
func TestLeaseAdmitsTrafficInTurnWasm(t *testing.T) {
	t.Parallel()
	eachWasmLeaseTraffic(t, "1h", []int{50, 100}, []int{4, 8}, 200, 10*time.Millisecond)
}
