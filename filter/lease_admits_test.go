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

// checkLeaseAdmits runs tr with and without a lease of tr.batch (default ttl, 1s) and checks
// the bounds.
func checkLeaseAdmits(t *testing.T, tr leaseTraffic) {
	exact := tr.admitted(t, "exact", "")
	leased := tr.admitted(t, "leased", fmt.Sprintf(`,"lease":{"batch":%d}`, tr.batch))
	t.Logf("exact %d, leased %d", exact, leased)
	require.GreaterOrEqual(t, leased*100, exact*95, "the lease admits at least 95%% of the exact decision's %d", exact)
	require.LessOrEqual(t, leased, exact+tr.workers*tr.batch, "over-admission beyond holders x batch")
}

// leaseAdmitAlgos are the algorithms a lease applies to, at limit per window.
func leaseAdmitAlgos(limit int, window string) map[string]string {
	m := map[string]string{}
	for _, a := range []string{"token_bucket", "leaky_bucket", "gcra", "fixed_window", "sliding_window"} {
		m[a] = fmt.Sprintf(`"algorithm":%q,"limit":%d,"window":%q`, a, limit, window)
	}
	return m
}

// TestLeaseAdmitsPacedTraffic: one request every 100 ms for two minutes, limit 100 per minute,
// over 1 and 4 worker VMs, batch 10 and 100. Units a worker cannot spend within the ttl must
// neither be reserved nor lost.
func TestLeaseAdmitsPacedTraffic(t *testing.T) {
	for name, algo := range leaseAdmitAlgos(100, "1m") {
		for _, batch := range []int{10, 100} {
			for _, workers := range []int{1, 4} {
				t.Run(fmt.Sprintf("%s/batch=%d/workers=%d", name, batch, workers), func(t *testing.T) {
					checkLeaseAdmits(t, leaseTraffic{algo: algo, batch: batch, workers: workers, n: 1200, step: 100 * time.Millisecond})
				})
			}
		}
	}
}

// TestLeaseAdmitsTrafficInTurn: 200 requests in turn over 4 and 8 worker VMs, one every 10 ms,
// limit 100 per hour, batch 50 and 100: no worker may hold the window while the others are
// denied.
func TestLeaseAdmitsTrafficInTurn(t *testing.T) {
	for name, algo := range leaseAdmitAlgos(100, "1h") {
		for _, batch := range []int{50, 100} {
			for _, workers := range []int{4, 8} {
				t.Run(fmt.Sprintf("%s/batch=%d/workers=%d", name, batch, workers), func(t *testing.T) {
					checkLeaseAdmits(t, leaseTraffic{algo: algo, batch: batch, workers: workers, n: 200, step: 10 * time.Millisecond})
				})
			}
		}
	}
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

// checkGlobalLeaseAdmits is checkLeaseAdmits for a global rule.
func checkGlobalLeaseAdmits(t *testing.T, srv *redistest.Server, tr leaseTraffic) {
	exact := tr.globalAdmitted(t, srv, "exact", "")
	leased := tr.globalAdmitted(t, srv, "leased", fmt.Sprintf(`,"lease":{"batch":%d}`, tr.batch))
	t.Logf("exact %d, leased %d", exact, leased)
	require.GreaterOrEqual(t, leased*100, exact*95, "the lease admits at least 95%% of the exact decision's %d", exact)
	require.LessOrEqual(t, leased, exact+tr.workers*tr.batch, "over-admission beyond holders x batch")
}

// TestGlobalLeaseAdmitsPacedTraffic is TestLeaseAdmitsPacedTraffic for global rules.
func TestGlobalLeaseAdmitsPacedTraffic(t *testing.T) {
	srv := redistest.Start(t)
	for name, algo := range leaseAdmitAlgos(100, "1m") {
		for _, batch := range []int{10, 100} {
			for _, workers := range []int{1, 4} {
				t.Run(fmt.Sprintf("%s/batch=%d/workers=%d", name, batch, workers), func(t *testing.T) {
					checkGlobalLeaseAdmits(t, srv, leaseTraffic{algo: algo, batch: batch, workers: workers, n: 1200, step: 100 * time.Millisecond})
				})
			}
		}
	}
}

// TestGlobalLeaseAdmitsTrafficInTurn is TestLeaseAdmitsTrafficInTurn for global rules.
func TestGlobalLeaseAdmitsTrafficInTurn(t *testing.T) {
	srv := redistest.Start(t)
	for name, algo := range leaseAdmitAlgos(100, "1h") {
		for _, batch := range []int{50, 100} {
			for _, workers := range []int{4, 8} {
				t.Run(fmt.Sprintf("%s/batch=%d/workers=%d", name, batch, workers), func(t *testing.T) {
					checkGlobalLeaseAdmits(t, srv, leaseTraffic{algo: algo, batch: batch, workers: workers, n: 200, step: 10 * time.Millisecond})
				})
			}
		}
	}
}
