package filtertest

import (
	"fmt"
	"testing"
	"time"
)

// A ConfigChangeRow exhausts (or uses) a key under one rule, then asks under the changed rule.
// The rows are the changes that would grant allowance if a state did not record the parameters
// it was written under (token-bucket units depend on gcd(limit, window), and a GCRA or meter
// state would be read under the new emission interval).
type ConfigChangeRow struct {
	Name          string
	Before, After string // the rule's algorithm fields before and after the change
	Used          int    // requests before the change; -1: until denied
	Want          int    // allowed after the change, a minute later, out of 20
}

// ConfigChangeRows are the configuration changes that must never grant allowance.
var ConfigChangeRows = []ConfigChangeRow{
	{"token_bucket 11/h used 10 -> 10/h", `"algorithm":"token_bucket","limit":11,"window":"1h"`, `"algorithm":"token_bucket","limit":10,"window":"1h"`, 10, 1},
	{"token_bucket 10/h used 5 -> 10/30m", `"algorithm":"token_bucket","limit":10,"window":"1h"`, `"algorithm":"token_bucket","limit":10,"window":"30m"`, 5, 5},
	{"gcra 10/1h all -> 10/2h", `"algorithm":"gcra","limit":10,"window":"1h"`, `"algorithm":"gcra","limit":10,"window":"2h"`, -1, 0},
	{"leaky_bucket 10/1h all -> 10/2h", `"algorithm":"leaky_bucket","limit":10,"window":"1h"`, `"algorithm":"leaky_bucket","limit":10,"window":"2h"`, -1, 0},
	{"gcra 10/1h all -> 5/2h", `"algorithm":"gcra","limit":10,"window":"1h"`, `"algorithm":"gcra","limit":5,"window":"2h"`, -1, 0},
	{"fixed_window 10/1h all -> token_bucket 10/1h", `"algorithm":"fixed_window","limit":10,"window":"1h"`, `"algorithm":"token_bucket","limit":10,"window":"1h"`, -1, 0},
	{"sliding log 10/1h all -> gcra 20/1h", `"algorithm":"sliding_window","variant":"log","limit":10,"window":"1h"`, `"algorithm":"gcra","limit":20,"window":"1h"`, -1, 0},
}

// ConfigChangeRule is the configuration of a one-rule filter keyed on x-k with algo's fields.
func ConfigChangeRule(algo string) string {
	return fmt.Sprintf(`{"rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],%s}]}`, algo)
}

// UseBefore sends the row's requests before the configuration change through d.
func (row ConfigChangeRow) UseBefore(t *testing.T, d Driver) {
	for i := 0; row.Used < 0 || i < row.Used; i++ {
		if d.Do(t, T0, XK("client")).Status != 0 {
			if row.Used >= 0 {
				t.Fatalf("request %d of %d denied", i, row.Used)
			}
			return
		}
		if i >= 100 {
			t.Fatal("never denied")
		}
	}
}

// CheckAfter asks 20 times a minute later through d and compares the allowed count with Want.
func (row ConfigChangeRow) CheckAfter(t *testing.T, d Driver) {
	allowed := 0
	for range 20 {
		if d.Do(t, T0.Add(time.Minute), XK("client")).Status == 0 {
			allowed++
		}
	}
	if allowed != row.Want {
		t.Fatalf("%d allowed after the change, want %d", allowed, row.Want)
	}
}
