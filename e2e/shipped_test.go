package e2e

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// An IPv6 client is usually given a whole /64 (RFC 6177), so a per-IP limit keyed on the full
// address lets it rotate through 2^64 addresses, each with a fresh allowance. Every per-IP key
// in the shipped envoy.yaml counts IPv6 clients per /64, and the compiled module, given that
// configuration, admits 50 addresses of one /64 no more than one address.
//
// The e2e proxies listen on IPv4 loopback, where a test cannot own 50 IPv6 addresses, so this
// runs the module in the wazero host directly with envoy.yaml's plugin configuration and the
// source addresses Envoy would report.
func TestShippedConfigLimitsIPv6Networks(t *testing.T) {
	c, err := envoyconf.Load(filepath.Join("..", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Listeners[0].Filter
	cfg, err := config.Parse(f.PluginConfig)
	if err != nil {
		t.Fatal(err)
	}
	keyed := 0
	for _, r := range cfg.Rules {
		for _, kp := range r.Key {
			if kp.Source == config.SourceClientIP {
				keyed++
				if kp.IPv6Prefix > 64 {
					t.Errorf("rule %s keys on client_ip with ipv6_prefix %d: one IPv6 client can rotate through its /64", r.Name, kp.IPv6Prefix)
				}
			}
		}
	}
	if keyed < 3 {
		t.Fatalf("found %d per-IP keys in envoy.yaml; the test expects the login, public API and catch-all ones", keyed)
	}

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h, err := wasmhost.New(context.Background(), wasmtest.BuildModule(t), wasmhost.Options{
		Workers: 2, VMID: f.VMID, PluginName: f.PluginName, RootID: f.RootID,
		PluginConfig: f.PluginConfig, SharedData: wasmhost.NewSharedData(),
		Clock: func() time.Time { return now }, // no refill during the test
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	network := netip.MustParsePrefix("2001:db8:1:2::/64")
	for _, tc := range []struct {
		route, method, path string
		allowed             int // the rule's burst
	}{
		{"public-api", "GET", "/api/items", 5},
		{"login", "POST", "/login", 5},
	} {
		got := 0
		for i := 0; i < 50; i++ {
			a := network.Addr().As16()
			a[8], a[15] = byte(i), byte(i*7) // vary the interface identifier, keep the /64
			src := netip.AddrPortFrom(netip.AddrFrom16(a), 40000).String()
			res, err := h.Do(context.Background(), wasmhost.Request{
				Worker: -1, Method: tc.method, Path: tc.path, RouteName: tc.route, VirtualHost: "default",
				SourceAddress: src,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Local == nil {
				got++
			}
		}
		if got != tc.allowed {
			t.Errorf("%s: %d of 50 requests from one /64 admitted, want %d (one client's allowance)", tc.route, got, tc.allowed)
		}
	}
}
