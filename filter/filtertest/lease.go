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
