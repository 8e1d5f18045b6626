package filtertest

import (
	"fmt"
	"testing"
)

// OverflowLeaseDriver runs requests through one worker VM of a proxy whose rule "y" is global
// and keyed by the header x-y, against a real Redis.
type OverflowLeaseDriver interface {
	// AdmitY sends a request with x-y: v and says whether the filter let it through.
	AdmitY(t *testing.T, v string) bool
	Metric(t *testing.T, name string) int64
}

// An OverflowLeaseCase is a global rule "y" (fixed window, 100 an hour, max_keys 4) over
// Partitions partitions, whose key bound Fills clients reach, for CheckNeverOnOverflowKey.
type OverflowLeaseCase struct {
	Partitions, Fills int
	// WantExact, when not 0, is how many of the new clients the exact decision admits.
	WantExact int
}

// OverflowLeaseCases are the cases of CheckNeverOnOverflowKey: with one partition, four
// clients fill the key set exactly and leave the overflow key its whole limit; twenty fill it
// with one partition. With four (one key each), the partition secret spreads clients at
// random: twenty leave a partition without a fill client in about one run of 75, and a new
// client then takes its free key; eighty, in about one of 2.5 billion.
var OverflowLeaseCases = []OverflowLeaseCase{{1, 4, 100}, {1, 20, 0}, {4, 80, 0}}

// Name names the case in a test.
func (c OverflowLeaseCase) Name() string {
	return fmt.Sprintf("partitions=%d/fills=%d", c.Partitions, c.Fills)
}

// Config is the case's configuration, with a lease of batch 10 on y when leased.
func (c OverflowLeaseCase) Config(leased bool) string {
	lease := ""
	if leased {
		lease = `,"lease":{"batch":10,"ttl":"1m"}`
	}
	return GlobalConfig(RedisOpts{Partitions: c.Partitions},
		`[{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"fixed_window","limit":100,"window":"1h","max_keys":4`+lease+`}]`)
}

// CheckNeverOnOverflowKey checks that a global rule's overflow key limits every new client
// that finds the key bound reached as one client: on a driver that start returns for the
// exact configuration and for the leased one (each in a subtest of its own, on a fresh Redis),
// 100 such clients send one request each, all decided on the overflow key, and the lease gives
// them what the exact decision gives them (some, and WantExact when set). A lease there would
// debit a whole batch per client and admit limit/batch of them.
func (c OverflowLeaseCase) CheckNeverOnOverflowKey(t *testing.T, start func(t *testing.T, config string) OverflowLeaseDriver) {
	t.Helper()
	admitted := map[string]int{}
	for _, name := range []string{"exact", "leased"} {
		t.Run(name, func(t *testing.T) {
			d := start(t, c.Config(name == "leased"))
			for i := range c.Fills {
				if !d.AdmitY(t, fmt.Sprint("fill", i)) {
					t.Fatalf("fill client %d denied", i)
				}
			}
			before := d.Metric(t, "ratelimit_key_overflow_total;rule=y")
			for i := range 100 {
				if d.AdmitY(t, fmt.Sprint("new", i)) {
					admitted[name]++
				}
			}
			if n := d.Metric(t, "ratelimit_key_overflow_total;rule=y") - before; n != 100 {
				t.Fatalf("%d of the 100 new clients decided on the overflow key, want every one", n)
			}
		})
	}
	if admitted["exact"] != admitted["leased"] {
		t.Fatalf("the lease admitted %d new clients, the exact decision %d", admitted["leased"], admitted["exact"])
	}
	if admitted["exact"] == 0 || c.WantExact != 0 && admitted["exact"] != c.WantExact {
		t.Fatalf("the exact decision admitted %d new clients, want %d (0: some)", admitted["exact"], c.WantExact)
	}
}
