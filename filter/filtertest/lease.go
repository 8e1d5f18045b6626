package filtertest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// LeaseDriver runs requests on chosen worker VMs of one proxy, on a clock of its own.
type LeaseDriver interface {
	// Advance moves the clock by d.
	Advance(d time.Duration)
	// Admit sends a request on worker VM w and says whether the filter let it through.
	Admit(t *testing.T, w int) bool
}

// A LeaseBoundCase is one algorithm a lease applies to, on a number of worker VMs, for
// CheckLeaseBound.
type LeaseBoundCase struct {
	Name      string
	Algorithm string
	// Windowed algorithms promise at most limit in each aligned window (the fixed window; the
	// sliding window counter, whose current window's count alone never passes the limit); the
	// others, bucket-like, at most burst + rate x d in any interval of length d (the token
	// bucket of RFC 2697, the leaky bucket meter, GCRA per ITU-T I.371 with burst tolerance).
	Windowed bool
	Workers  int
}

// The lease bound's rule: 50 a second, lease batch 10, ttl 500 ms.
const (
	leaseBoundLimit  = 50
	leaseBoundBatch  = 10
	leaseBoundWindow = int64(time.Second)
)

// LeaseBoundCases are the cases of CheckLeaseBound: every algorithm a lease applies to, on 1,
// 4 and 8 worker VMs.
var LeaseBoundCases = func() []LeaseBoundCase {
	var cases []LeaseBoundCase
	for _, workers := range []int{1, 4, 8} {
		for _, a := range []struct {
			name     string
			windowed bool
		}{{"token_bucket", false}, {"leaky_bucket", false}, {"gcra", false}, {"fixed_window", true}, {"sliding_window", true}} {
			cases = append(cases, LeaseBoundCase{Name: fmt.Sprintf("%s/%dvms", a.name, workers),
				Algorithm: a.name, Windowed: a.windowed, Workers: workers})
		}
	}
	return cases
}()

// Config is the case's configuration: one rule "hot" with a lease.
func (c LeaseBoundCase) Config() string {
	return fmt.Sprintf(`{"rules":[{"name":"hot","algorithm":%q,"limit":%d,"window":"1s","lease":{"batch":%d,"ttl":"500ms"}}]}`,
		c.Algorithm, leaseBoundLimit, leaseBoundBatch)
}

// CheckLeaseBound checks the bound of the README's lease section on random traffic, on a
// driver started with c.Config() and c.Workers worker VMs: the VMs share one key's state,
// each with a lease of up to batch units, and the clock moves by random steps. Within any
// interval the admissions never exceed the algorithm's own contract by more than workers x
// batch; from the start (when nobody held units) they never exceed the contract at all. The
// traffic overloads the key, so a lease that admitted far fewer than the contract would show
// too (under-admission is allowed, but bounded by the units dropped): at least half of the
// contract over the run.
func (c LeaseBoundCase) CheckLeaseBound(t *testing.T, d LeaseDriver) {
	t.Helper()
	const limit, window = leaseBoundLimit, leaseBoundWindow
	rng := rand.New(rand.NewPCG(uint64(c.Workers), 13))
	var admitted []int64
	var elapsed int64
	for range 3000 {
		// About 200 requests per second against a limit of 50: bursts, quiet spells and
		// sustained overload.
		gap := rng.Int64N(int64(10 * time.Millisecond))
		d.Advance(time.Duration(gap))
		elapsed += gap
		if d.Admit(t, rng.IntN(c.Workers)) {
			admitted = append(admitted, elapsed)
		}
	}
	excess := int64(c.Workers * leaseBoundBatch)
	rate := func(d int64) int64 { return limit * d / window }
	// Every pair of admissions is checked; t.Fatalf runs only for a pair over its bound.
	for i := range admitted {
		if n, bound := int64(i+1), limit+rate(admitted[i]); !c.Windowed && n > bound {
			// From the start: nothing admitted that was not debited.
			t.Fatalf("from the start to admission %d: %d admitted, bound %d", i, n, bound)
		}
		for j := i; j < len(admitted); j++ {
			n := int64(j - i + 1)
			if c.Windowed {
				if admitted[j]/window != admitted[i]/window {
					break
				}
				if n > limit+excess {
					t.Fatalf("window %d: %d admitted, bound %d", admitted[i]/window, n, limit+excess)
				}
				if admitted[i]/window == 0 && n > limit {
					// The first window: nobody held units before it began.
					t.Fatalf("the first window: %d admitted, bound %d", n, limit)
				}
			} else if bound := limit + rate(admitted[j]-admitted[i]) + excess; n > bound {
				t.Fatalf("admissions %d..%d: %d admitted, bound %d", i, j, n, bound)
			}
		}
	}
	if n, least := int64(len(admitted)), rate(elapsed)/2; n < least {
		t.Fatalf("%d admitted over %v, want at least %d (half the contract)", n, time.Duration(elapsed), least)
	}
}

// WritesDriver is a LeaseDriver that also counts the writes its shared data has taken and
// reads the filter's metrics.
type WritesDriver interface {
	LeaseDriver
	// Writes returns how many writes the shared data has taken so far.
	Writes() int64
	Metric(t *testing.T, name string) int64
}

// A WritesCase is a hot local key below its limit, for CheckWritesPerRequest: Requests
// requests round robin over Workers worker VMs, the clock moving by Step before each, on a
// token bucket of Limit a second with or without a lease of batch 100.
type WritesCase struct {
	Workers, Requests int
	Limit             int64
	Step              time.Duration
	Lease             bool
}

// WritesCases are the cases of CheckWritesPerRequest.
var WritesCases = func() []WritesCase {
	var cases []WritesCase
	for _, lease := range []bool{true, false} {
		cases = append(cases, WritesCase{Workers: 4, Requests: 2000, Limit: 1_000_000, Step: time.Microsecond, Lease: lease},
			WritesCase{Workers: 8, Requests: 800, Limit: 1_000_000_000, Lease: lease})
	}
	return cases
}()

// Name names the case in a test.
func (c WritesCase) Name() string { return fmt.Sprintf("%dvms/lease=%v", c.Workers, c.Lease) }

// Config is the case's configuration: one rule "hot".
func (c WritesCase) Config() string {
	lease := ""
	if c.Lease {
		lease = `,"lease":{"batch":100}`
	}
	return fmt.Sprintf(`{"rules":[{"name":"hot","algorithm":"token_bucket","limit":%d,"window":"1s"%s}]}`, c.Limit, lease)
}

// CheckWritesPerRequest checks what leases are for, on a driver started with c.Config() and
// c.Workers worker VMs: every request is admitted, and a hot key below its limit costs at most
// 0.1 shared-data writes per request with a lease (batch 100: about 0.01), at least one and at
// most 1.01 without, with no compare-and-swap exhausted.
func (c WritesCase) CheckWritesPerRequest(t *testing.T, d WritesDriver) {
	t.Helper()
	lo, hi := 1.0, 1.01
	if c.Lease {
		lo, hi = 0, 0.1
	}
	before := d.Writes()
	for i := range c.Requests {
		d.Advance(c.Step)
		if !d.Admit(t, i%c.Workers) {
			t.Fatalf("request %d denied below the limit", i)
		}
	}
	per := float64(d.Writes()-before) / float64(c.Requests)
	t.Logf("%.3f shared-data writes per request", per)
	if per < lo || per > hi {
		t.Fatalf("%.3f shared-data writes per request, want %v to %v", per, lo, hi)
	}
	if ex := d.Metric(t, "ratelimit_cas_exhausted_total;rule=hot"); ex != 0 {
		t.Fatalf("cas_exhausted_total %d, want 0", ex)
	}
}

// A LeaseTraffic is one traffic pattern of CheckLeaseAdmits: Requests requests, one every
// Step, request i on worker VM i % Workers, on a rule "hot" of Algorithm at 100 per Window,
// run once with a lease of Batch (ttl 1s, the default) and once without.
type LeaseTraffic struct {
	Algorithm, Window        string
	Batch, Workers, Requests int
	Step                     time.Duration
}

// LeaseAlgorithms are the algorithms a lease applies to.
var LeaseAlgorithms = []string{"token_bucket", "leaky_bucket", "gcra", "fixed_window", "sliding_window"}

// leaseTraffics is every pattern of algos at 100 per window, every batch and every number of
// workers: n requests, one every step.
func leaseTraffics(algos []string, window string, batches, workers []int, n int, step time.Duration) []LeaseTraffic {
	var out []LeaseTraffic
	for _, a := range algos {
		for _, batch := range batches {
			for _, w := range workers {
				out = append(out, LeaseTraffic{Algorithm: a, Window: window, Batch: batch, Workers: w, Requests: n, Step: step})
			}
		}
	}
	return out
}

// PacedLeaseTraffic is one request every 100 ms for two minutes, limit 100 per minute, over 1
// and 4 worker VMs, batch 10 and 100, for each of algos. Units a worker cannot spend within
// the ttl must neither be reserved nor lost.
func PacedLeaseTraffic(algos []string) []LeaseTraffic {
	return leaseTraffics(algos, "1m", []int{10, 100}, []int{1, 4}, 1200, 100*time.Millisecond)
}

// LeaseTrafficInTurn is 200 requests in turn over 4 and 8 worker VMs, one every 10 ms, limit
// 100 per hour, batch 50 and 100, for each of algos: no worker may hold the window while the
// others are denied.
func LeaseTrafficInTurn(algos []string) []LeaseTraffic {
	return leaseTraffics(algos, "1h", []int{50, 100}, []int{4, 8}, 200, 10*time.Millisecond)
}

// Name names the pattern in a test.
func (tr LeaseTraffic) Name() string {
	return fmt.Sprintf("%s/batch=%d/workers=%d", tr.Algorithm, tr.Batch, tr.Workers)
}

// Exact is the pattern without its batch: the exact decision's admissions depend on nothing
// else, so one exact run serves every batch.
func (tr LeaseTraffic) Exact() LeaseTraffic {
	tr.Batch = 0
	return tr
}

// RuleFields are the fields of the pattern's rule after its name: algorithm, limit, window,
// and the lease block when leased.
func (tr LeaseTraffic) RuleFields(leased bool) string {
	f := fmt.Sprintf(`"algorithm":%q,"limit":100,"window":%q`, tr.Algorithm, tr.Window)
	if leased {
		f += fmt.Sprintf(`,"lease":{"batch":%d}`, tr.Batch)
	}
	return f
}

// Config is the configuration of the pattern's local rule "hot", leased or not.
func (tr LeaseTraffic) Config(leased bool) string {
	return `{"rules":[{"name":"hot",` + tr.RuleFields(leased) + `}]}`
}

// Admitted runs the pattern on d, started with one of its configurations and tr.Workers
// worker VMs, and returns how many requests were admitted.
func (tr LeaseTraffic) Admitted(t *testing.T, d LeaseDriver) int {
	t.Helper()
	admitted := 0
	for i := range tr.Requests {
		if d.Admit(t, i%tr.Workers) {
			admitted++
		}
		d.Advance(tr.Step)
	}
	return admitted
}

// CheckLeaseAdmits checks the pattern's leased admissions against the exact ones: a lease must
// not deny what the exact decision admits (it admits at least 95% of it), nor admit more than
// that plus the over-admission bound (holders x batch).
func (tr LeaseTraffic) CheckLeaseAdmits(t *testing.T, exact, leased int) {
	t.Helper()
	t.Logf("exact %d, leased %d", exact, leased)
	if leased*100 < exact*95 {
		t.Fatalf("leased %d: the lease must admit at least 95%% of the exact decision's %d", leased, exact)
	}
	if leased > exact+tr.Workers*tr.Batch {
		t.Fatalf("leased %d, exact %d: over-admission beyond holders x batch (%d)", leased, exact, tr.Workers*tr.Batch)
	}
}

// LeaseMapKeys is how many keys fill a worker VM's lease map for one rule: the filter holds
// leases on at most this many keys of a rule (maxHeld).
const LeaseMapKeys = 4096

// LeaseMapFullConfig is the configuration of CheckLeaseMapFull: a local rule "u" keyed by the
// header x-u, 20 an hour, lease batch 10, ttl 1m.
const LeaseMapFullConfig = `{"rules":[{"name":"u","key":[{"source":"header","name":"x-u"}],"algorithm":"fixed_window","limit":20,"window":"1h","lease":{"batch":10,"ttl":"1m"}}]}`

// LeaseMapDriver runs requests through one worker VM at one instant.
type LeaseMapDriver interface {
	// AdmitU sends a request with x-u: v and says whether the filter let it through.
	AdmitU(t *testing.T, v string) bool
	Metric(t *testing.T, name string) int64
}

// CheckLeaseMapFull checks, on a driver started with LeaseMapFullConfig, that a key the VM's
// full lease map does not hold is decided exactly: a client sends LeaseMapKeys distinct keys,
// each of which takes a batch the VM holds, so the map is full and none of its leases has
// expired; another client's key then admits its whole limit, 20 of 25 requests, and takes no
// batch. A batch of ten debited for each of its requests, which the full map cannot hold,
// would let the key admit two.
func CheckLeaseMapFull(t *testing.T, d LeaseMapDriver) {
	t.Helper()
	taken := func() int64 { return d.Metric(t, "ratelimit_lease_taken_total;rule=u") }
	for i := range LeaseMapKeys {
		if !d.AdmitU(t, fmt.Sprint("flood", i)) {
			t.Fatalf("flood key %d denied", i)
		}
	}
	if n := taken(); n != LeaseMapKeys {
		t.Fatalf("lease_taken_total %d, want %d: every flood key holds a lease", n, LeaseMapKeys)
	}
	admitted := 0
	for range 25 {
		if d.AdmitU(t, "victim") {
			admitted++
		}
	}
	if admitted != 20 {
		t.Fatalf("the victim's key admitted %d of 25, want exactly its limit, 20", admitted)
	}
	if n := taken(); n != LeaseMapKeys {
		t.Fatalf("lease_taken_total %d after the victim's requests, want %d: it takes no batch", n, LeaseMapKeys)
	}
}
