package filtertest

import "testing"

// StoreFailureDriver is a TableDriver whose shared data can be made to fail.
type StoreFailureDriver interface {
	TableDriver
	// FailStore makes the reads (when reads) and the writes (when writes) of rule's keys in
	// shared data fail from then on, and no other key's: it replaces the previous failure.
	FailStore(rule string, reads, writes bool)
}

// A StoreFailure is which of a rule's shared-data operations fail.
type StoreFailure struct {
	Name          string
	Reads, Writes bool
}

// StoreFailures are the shared-data failures both drivers check alike.
var StoreFailures = []StoreFailure{{"reads fail", true, false}, {"writes fail", false, true}, {"reads and writes fail", true, true}}

// ShadowStoreConfig is the configuration of CheckShadowNeverDenies, under top-level
// failure_mode "deny": a shadow rule "dry" on every request and an enforced rule "enforced" on
// paths under /enforced.
const ShadowStoreConfig = `{"failure_mode":"deny","rules":[
	{"name":"dry","shadow":true,"continue":true,"algorithm":"fixed_window","limit":5,"window":"1m"},
	{"name":"enforced","match":{"path":{"prefix":"/enforced"}},"algorithm":"fixed_window","limit":5,"window":"1m"}]}`

// CheckShadowNeverDenies checks, on a driver started with ShadowStoreConfig, that a shadow
// rule never denies, not even when its shared data fails as f says under failure_mode "deny":
// it counts each failure in store_errors_total, counts no would-be denial, and the request
// goes through. An enforced rule whose shared data fails alike still answers 429 (the failure
// mode applies to it).
func (f StoreFailure) CheckShadowNeverDenies(t *testing.T, d StoreFailureDriver) {
	t.Helper()
	d.FailStore("dry", f.Reads, f.Writes)
	for i := range 3 {
		if o := d.Do(t, T0, Step{Path: "/x"}); o.Status != 0 {
			t.Fatalf("request %d of a shadow rule with a failing store: status %d, want 0 (continued)", i, o.Status)
		}
	}
	if n := d.Metric(t, "ratelimit_store_errors_total;rule=dry"); n != 3 {
		t.Fatalf("store_errors_total of the shadow rule %d, want 3", n)
	}
	if n := d.Metric(t, "ratelimit_requests_total;rule=dry;decision=shadow_denied"); n != 0 {
		t.Fatalf("shadow_denied %d, want 0", n)
	}
	d.FailStore("enforced", f.Reads, f.Writes)
	if o := d.Do(t, T0, Step{Path: "/enforced"}); o.Status != 429 {
		t.Fatalf("an enforced rule with a failing store: status %d, want 429 (it still fails closed)", o.Status)
	}
}
