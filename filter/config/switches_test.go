package config

import (
	"testing"
	"time"
)

// TestLookupSwitches checks the switches that replaced package-level maps (so that no
// initialiser builds them) against the maps' former contents, and that other names are
// unknown.
func TestLookupSwitches(t *testing.T) {
	units := map[string]uint64{
		"ns": uint64(time.Nanosecond), "us": uint64(time.Microsecond),
		"µs": uint64(time.Microsecond), "μs": uint64(time.Microsecond),
		"ms": uint64(time.Millisecond), "s": uint64(time.Second), "m": uint64(time.Minute),
		"h": uint64(time.Hour), "d": uint64(24 * time.Hour),
	}
	for unit, want := range units {
		if got, ok := durationUnit(unit); !ok || got != want {
			t.Errorf("durationUnit(%q) = %d, %v; want %d", unit, got, ok, want)
		}
	}
	phs := map[string]placeholder{"%RULE%": phRule, "%RETRY_AFTER%": phRetryAfter}
	for name, want := range phs {
		if got, ok := placeholderNamed(name); !ok || got != want {
			t.Errorf("placeholderNamed(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
	reserved := map[string]string{
		"content-type":          `use "content_type"`,
		"content-length":        "computed from the body",
		"retry-after":           "set by the filter",
		"ratelimit":             "set by the filter",
		"ratelimit-policy":      "set by the filter",
		"x-ratelimit-limit":     "set by the filter",
		"x-ratelimit-remaining": "set by the filter",
		"x-ratelimit-reset":     "set by the filter",
		"x-envoy-ratelimited":   `set by the filter; see "envoy_ratelimited_header"`,
	}
	for name, want := range reserved {
		if got, ok := reservedDenyHeader(name); !ok || got != want {
			t.Errorf("reservedDenyHeader(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, other := range []string{"", "S", "sec", "%rule%", "%RULE", "Content-Type", "x-tenant", "ratelimit-reset"} {
		if _, ok := durationUnit(other); ok {
			t.Errorf("durationUnit(%q) is known", other)
		}
		if _, ok := placeholderNamed(other); ok {
			t.Errorf("placeholderNamed(%q) is known", other)
		}
		if _, ok := reservedDenyHeader(other); ok {
			t.Errorf("reservedDenyHeader(%q) is known", other)
		}
	}
}
