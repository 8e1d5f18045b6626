package filter

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A lease must not deny what the exact decision admits: the tests below run one traffic
// pattern twice on the native worker VMs (lease_test.go), once on a rule with a lease block
// and once on the same rule without, on the host's fake clock, and compare the admissions.
// The lease must admit at least 95% of what the exact decision admits, and at most that plus
// the over-admission bound (holders x batch).

// leaseTraffic is one pattern: n requests, one every step, request i on worker i % workers.
type leaseTraffic struct {
	algo    string
	batch   int
	workers int
	n       int
	step    time.Duration
}

// admitted runs tr on a rule named hot with the lease block lease (none when empty) and
// returns how many requests were admitted. It runs as a subtest of its own: one host emulator
// at a time.
func (tr leaseTraffic) admitted(t *testing.T, name, lease string) (admitted int) {
	t.Run(name, func(t *testing.T) {
		l := newLeaseVMs(t, `{"rules":[{"name":"hot",`+tr.algo+lease+`}]}`, tr.workers)
		for i := range tr.n {
			if l.do(i % tr.workers) {
				admitted++
			}
			l.now += int64(tr.step)
		}
	})
	return admitted
}

// requireLeaseAdmits checks the leased admissions of tr against the exact ones.
func requireLeaseAdmits(t *testing.T, tr leaseTraffic, exact, leased int) {
	t.Helper()
	t.Logf("exact %d, leased %d", exact, leased)
	require.GreaterOrEqual(t, leased*100, exact*95, "the lease admits at least 95%% of the exact decision's %d", exact)
	require.LessOrEqual(t, leased, exact+tr.workers*tr.batch, "over-admission beyond holders x batch")
}

// leaseBlock is a lease block of tr's batch, with the default ttl (1s).
func (tr leaseTraffic) leaseBlock() string { return fmt.Sprintf(`,"lease":{"batch":%d}`, tr.batch) }

// leaseAlgorithms are the algorithms a lease applies to.
var leaseAlgorithms = []string{"token_bucket", "leaky_bucket", "gcra", "fixed_window", "sliding_window"}

// globalLeaseAlgorithms are the ones the global tests run: a bucket and a window. The filter's
// lease code is the same for every algorithm; what differs, the script's give-back for each,
// is held to the Go algorithms by the differential test in sharedstate/redis.
var globalLeaseAlgorithms = []string{"token_bucket", "fixed_window"}

// eachLeaseTraffic runs check as a subtest for each of algos at limit per window, every batch
// and every number of workers: n requests, one every step.
func eachLeaseTraffic(t *testing.T, algos []string, limit int, window string, batches, workers []int, n int, step time.Duration, check func(*testing.T, leaseTraffic)) {
	for _, a := range algos {
		for _, batch := range batches {
			for _, w := range workers {
				tr := leaseTraffic{algo: fmt.Sprintf(`"algorithm":%q,"limit":%d,"window":%q`, a, limit, window),
					batch: batch, workers: w, n: n, step: step}
				t.Run(fmt.Sprintf("%s/batch=%d/workers=%d", a, batch, w), func(t *testing.T) { check(t, tr) })
			}
		}
	}
}

// checkLeaseAdmits runs tr on local rules with and without a lease and checks the bounds.
func checkLeaseAdmits(t *testing.T, tr leaseTraffic) {
	requireLeaseAdmits(t, tr, tr.admitted(t, "exact", ""), tr.admitted(t, "leased", tr.leaseBlock()))
}

// TestLeaseAdmitsPacedTraffic: one request every 100 ms for two minutes, limit 100 per minute,
// over 1 and 4 worker VMs, batch 10 and 100. Units a worker cannot spend within the ttl must
// neither be reserved nor lost.
func TestLeaseAdmitsPacedTraffic(t *testing.T) {
	eachLeaseTraffic(t, leaseAlgorithms, 100, "1m", []int{10, 100}, []int{1, 4}, 1200, 100*time.Millisecond, checkLeaseAdmits)
}

// TestLeaseAdmitsTrafficInTurn: 200 requests in turn over 4 and 8 worker VMs, one every 10 ms,
// limit 100 per hour, batch 50 and 100: no worker may hold the window while the others are
// denied.
func TestLeaseAdmitsTrafficInTurn(t *testing.T) {
	eachLeaseTraffic(t, leaseAlgorithms, 100, "1h", []int{50, 100}, []int{4, 8}, 200, 10*time.Millisecond, checkLeaseAdmits)
}

// globalAdmitted runs tr on a global rule named hot, on one proxy of tr.workers worker VMs
// and a real Redis, with the lease block lease (none when empty).
func (tr leaseTraffic) globalAdmitted(t *testing.T, srv *redistest.Server, name, lease string) (admitted int) {
	t.Run(name, func(t *testing.T) {
		srv.MustDo("FLUSHALL")
		loadScripts(srv)
		rules := `[{"name":"hot","scope":"global",` + tr.algo + lease + `}]`
		l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{}, rules), 1, tr.workers)
		for i := range tr.n {
			if ok, _ := l.doRelayed(t, i%tr.workers, srv.WebdisURL()); ok {
				admitted++
			}
			l.now += int64(tr.step)
		}
	})
	return admitted
}

// checkGlobalLeaseAdmits is checkLeaseAdmits for a global rule on srv. The exact run does not
// depend on the batch, so it runs once for each traffic pattern and serves every batch.
func checkGlobalLeaseAdmits(srv *redistest.Server) func(*testing.T, leaseTraffic) {
	exact := map[leaseTraffic]int{}
	return func(t *testing.T, tr leaseTraffic) {
		pattern := tr
		pattern.batch = 0
		n, ok := exact[pattern]
		if !ok {
			n = tr.globalAdmitted(t, srv, "exact", "")
			exact[pattern] = n
		}
		requireLeaseAdmits(t, tr, n, tr.globalAdmitted(t, srv, "leased", tr.leaseBlock()))
	}
}

// TestGlobalLeaseAdmitsPacedTraffic is TestLeaseAdmitsPacedTraffic for global rules.
func TestGlobalLeaseAdmitsPacedTraffic(t *testing.T) {
	srv := redistest.Start(t)
	eachLeaseTraffic(t, globalLeaseAlgorithms, 100, "1m", []int{10, 100}, []int{1, 4}, 1200, 100*time.Millisecond, checkGlobalLeaseAdmits(srv))
}

// TestGlobalLeaseAdmitsTrafficInTurn is TestLeaseAdmitsTrafficInTurn for global rules.
func TestGlobalLeaseAdmitsTrafficInTurn(t *testing.T) {
	srv := redistest.Start(t)
	eachLeaseTraffic(t, globalLeaseAlgorithms, 100, "1h", []int{50, 100}, []int{4, 8}, 200, 10*time.Millisecond, checkGlobalLeaseAdmits(srv))
}
