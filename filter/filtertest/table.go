package filtertest

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/sharedstate"
)

// TableDriver is a Driver that also reads the filter's metrics.
type TableDriver interface {
	Driver
	Metric(t *testing.T, name string) int64
}

// A TableCase is one of the key table's promises through the whole filter (false denials,
// targeted lock-out, floods, max_keys changes), run natively under proxytest and against the
// compiled module.
type TableCase struct {
	Name    string
	Config  string
	Workers int // worker VMs in the wazero host; 0: the driver's default
	Check   func(t *testing.T, d TableDriver)
}

const tableConfig = `{"rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],"max_keys":10000,
		"algorithm":"token_bucket","limit":10,"window":"1h"}]}`

// TableCases are the key table's promises that both drivers check alike.
var TableCases = []TableCase{
	{
		// A targeted lock-out: four keys colliding with the victim's home slot under unkeyed
		// addressing, and ten requests from a fifth to drain the overflow slot. With keyed
		// addressing the victim's first request is allowed.
		Name:   "TargetedAttack",
		Config: tableConfig,
		Check: func(t *testing.T, d TableDriver) {
			attack := collidingValues(t, tableConfig, "victim", 10000, 5)
			for _, v := range attack[:4] {
				if o := d.Do(t, T0, XK(v)); o.Status != 0 {
					t.Fatalf("attacker %s: status %d", v, o.Status)
				}
			}
			for range 10 {
				d.Do(t, T0, XK(attack[4]))
			}
			if o := d.Do(t, T0, XK("victim")); o.Status != 0 {
				t.Fatalf("the victim's first request: %+v", o)
			}
		},
	},
	{
		// A flood: 10,010 distinct keys on a 10/h rule with max_keys 10000. At most the
		// documented share R / (64 x limit) is denied, R being the overflowing requests (the key_overflow_total metric); a new
		// client takes the slot of a flood key that spent 1 of its 10, so none overflows.
		Name:   "Flood",
		Config: tableConfig,
		Check: func(t *testing.T, d TableDriver) {
			for i := range 10010 {
				d.Do(t, T0, XK(fmt.Sprintf("flood-%d", i)))
			}
			denied := 0
			for i := range 100 {
				if d.Do(t, T0.Add(time.Second), XK(fmt.Sprintf("new-client-%d", i))).Status != 0 {
					denied++
				}
			}
			overflow := d.Metric(t, "ratelimit_key_overflow_total;rule=k")
			bound := 100 * float64(overflow) / float64(sharedstate.OverflowSlots*10)
			t.Logf("%d of 100 new clients denied; %d overflow decisions; bound %.1f", denied, overflow, bound)
			if float64(denied) > bound {
				t.Fatalf("%d denied, above the bound %.1f", denied, bound)
			}
			// A new key may use a free slot of two groups only: when both are full it takes the
			// slot of a key that spent little, so the last slots of a few groups stay unused.
			if used := d.Metric(t, "ratelimit_key_slots_used;rule=k"); used < 9800 || used > 10000 {
				t.Fatalf("key_slots_used %d, want 9,800 to 10,000", used)
			}
		},
	},
	{
		// A flood that spends little per key cannot keep new clients out, and cannot free the
		// slot of a key that spent its allowance: on a 1,000-key table at 10 per hour, 1,800
		// flood keys each send two requests a minute apart; at least 95 of the 100 new clients
		// that follow are admitted, every eviction grants back at most the 2 units its key
		// spent (ratelimit_key_eviction_granted_total over ratelimit_key_evictions_total), and
		// a key that spent its 10 before the flood is still denied after it.
		Name: "FloodOfTwoRequestKeys",
		Config: `{"rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],"max_keys":1000,
		"algorithm":"token_bucket","limit":10,"window":"1h"}]}`,
		Check: func(t *testing.T, d TableDriver) {
			for range 10 {
				if o := d.Do(t, T0, XK("spent-before")); o.Status != 0 {
					t.Fatalf("setup: the key's own allowance was denied: %+v", o)
				}
			}
			const flood = 1800
			for round := range 2 {
				for i := range flood {
					at := T0.Add(time.Second + time.Duration(round)*time.Minute + time.Duration(i)*time.Minute/flood)
					d.Do(t, at, XK(fmt.Sprintf("flood-%d", i)))
				}
			}
			now := T0.Add(3 * time.Minute)
			admitted := 0
			for i := range 100 {
				if d.Do(t, now, XK(fmt.Sprintf("new-client-%d", i))).Status == 0 {
					admitted++
				}
			}
			evictions, granted := d.Metric(t, "ratelimit_key_evictions_total;rule=k"), d.Metric(t, "ratelimit_key_eviction_granted_total;rule=k")
			t.Logf("%d of 100 new clients admitted; %d evictions granted %d units", admitted, evictions, granted)
			if admitted < 95 {
				t.Errorf("%d of 100 new clients admitted, want at least 95", admitted)
			}
			if evictions == 0 || granted > 2*evictions {
				t.Errorf("%d evictions granted %d units: want evictions, each granting at most the 2 units its key spent", evictions, granted)
			}
			if o := d.Do(t, now, XK("spent-before")); o.Status != 429 {
				t.Errorf("the key that spent its allowance before the flood, after it: %+v, want 429", o)
			}
		},
	},
	{
		// Every overflow decision is counted, the denied ones too, and the fill gauge says how
		// many of max_keys slots the rule has created, as all workers see it.
		Name: "OverflowMetricAndFill",
		Config: `{"rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],"max_keys":8,
		"algorithm":"fixed_window","limit":1,"window":"1h"}]}`,
		Workers: 3,
		Check: func(t *testing.T, d TableDriver) {
			if used := d.Metric(t, "ratelimit_key_slots_used;rule=k"); used != 0 {
				t.Fatalf("key_slots_used %d before any request", used)
			}
			for i := range 40 {
				for range 2 {
					d.Do(t, T0, XK(fmt.Sprintf("c%d", i)))
				}
			}
			// 8 keys have slots (16 decisions); the other 32 keys' 64 decisions are overflow
			// decisions, and the second request of each key that shares an overflow slot is
			// denied.
			if o := d.Metric(t, "ratelimit_key_overflow_total;rule=k"); o != 64 {
				t.Fatalf("key_overflow_total %d, want 64", o)
			}
			if used := d.Metric(t, "ratelimit_key_slots_used;rule=k"); used != 8 {
				t.Fatalf("key_slots_used %d, want 8", used)
			}
			allowed, denied := d.Metric(t, "ratelimit_requests_total;rule=k;decision=allowed"), d.Metric(t, "ratelimit_requests_total;rule=k;decision=denied")
			if allowed+denied != 80 {
				t.Fatalf("%d allowed + %d denied, want 80 decisions", allowed, denied)
			}
			if denied <= 8 {
				t.Fatalf("%d denied: the overflow denials are missing", denied)
			}
		},
	},
	{
		// key_slots_used is the fill of the rule's table, out of its max_keys: a key an
		// override decides is the rule's key, in the rule's slots, and counts like the others.
		Name: "SlotsUsedCountsOverrideKeys",
		Config: `{"rules":[{"name":"k","key":[{"source":"header","name":"x-k"}],"max_keys":8,
		"algorithm":"fixed_window","limit":5,"window":"1h","overrides":[{"exact":"vip","limit":50}]}]}`,
		Check: func(t *testing.T, d TableDriver) {
			for _, k := range []string{"a", "b", "c", "vip"} {
				if o := d.Do(t, T0, XK(k)); o.Status != 0 {
					t.Fatalf("key %s: status %d", k, o.Status)
				}
			}
			if used := d.Metric(t, "ratelimit_key_slots_used;rule=k"); used != 4 {
				t.Fatalf("key_slots_used %d after three keys of the rule and one of its override, want 4", used)
			}
		},
	},
}

// headerRequest is a request with one header, to build keys exactly as the filter does.
type headerRequest struct{ name, value string }

func (r headerRequest) Header(name string) (string, bool) {
	if name == r.name {
		return r.value, true
	}
	return "", false
}

// HeaderLines reports the one header as a single line.
func (r headerRequest) HeaderLines(name string) (first, last string, n int) {
	if name == r.name {
		return r.value, r.value, 1
	}
	return "", "", 0
}
func (headerRequest) Method() string                       { return "GET" }
func (headerRequest) Path() string                         { return "/" }
func (headerRequest) Route() string                        { return "" }
func (headerRequest) VirtualHost() string                  { return "" }
func (headerRequest) SourceAddress() string                { return "192.0.2.1:5555" }
func (headerRequest) ClientIPCache() *config.ClientIPCache { return nil }

// collidingValues returns n values of header x-k whose keys collide with the victim's under
// the slot formula before keyed addressing: SHA-256 bytes [8:16] little-endian mod max_keys,
// the home slot of four consecutive probes.
func collidingValues(t *testing.T, cfg, victim string, maxKeys uint64, n int) []string {
	c, err := config.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	home := func(v string) uint64 {
		key, ok := c.Rules[0].AppendKey(nil, headerRequest{"x-k", v})
		if !ok {
			t.Fatalf("no key for %q", v)
		}
		sum := sha256.Sum256(key)
		return binary.LittleEndian.Uint64(sum[8:16]) % maxKeys
	}
	want := home(victim)
	var out []string
	for i := 0; len(out) < n; i++ {
		if v := fmt.Sprintf("attacker-%d", i); home(v) == want {
			out = append(out, v)
		}
	}
	return out
}
