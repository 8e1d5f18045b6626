package config

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

// parseIP is parseIPText without the text.
func parseIP(s string) (netip.Addr, bool) {
	ip, _, ok := parseIPText(s)
	return ip, ok
}

// ipCases are client addresses as a request may carry them, each with the address parseIP
// reads from it, printed ("" when it is refused): with and without a port, bracketed, with a
// zone, IPv4-mapped, upper-case, blanks around it, and malformed in every way the grammar
// allows. IPv4 addresses are canonical only in dotted decimal without leading zeros.
var ipCases = []struct{ in, want string }{
	{"::", "::"},
	{"::1", "::1"},
	{"1::", "1::"},
	{"2001:db8::1", "2001:db8::1"},
	{"2001:DB8:0:0::1", "2001:db8::1"},
	{"[2001:db8::1]", "2001:db8::1"},
	{"[2001:db8::1]:8080", "2001:db8::1"},
	{"[2001:db8::1]:", ""},
	{"[2001:db8::1]:65536", ""},
	{"2001:db8::1:80", "2001:db8::1:80"},
	{"fe80::1%eth0", "fe80::1"},
	{"fe80::1%", ""},
	{"[fe80::1%eth0]:443", "fe80::1"},
	{"%eth0", ""},
	{"::ffff:1.2.3.4", "1.2.3.4"},
	{"[::ffff:192.0.2.7]:443", "192.0.2.7"},
	{"::1.2.3.4", "::102:304"},
	{"1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304"},
	{"1:2:3:4:5:6:7:1.2.3.4", ""},
	{"1:2:3:4:5:1.2.3.4", ""},
	{"::ffff:01.2.3.4", ""},
	{"1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"},
	{"1:2:3:4:5:6:7:8:9", ""},
	{"1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0"},
	{"::1:2:3:4:5:6:7", "0:1:2:3:4:5:6:7"},
	{"1::2::3", ""},
	{"12345::", ""},
	{"1:::2", ""},
	{":1", ""},
	{"1:", ""},
	{"[]", ""},
	{"[]:80", ""},
	{"[::1", ""},
	{"::1]", ""},
	{"[1.2.3.4]", "1.2.3.4"},
	{"[1.2.3.4]:80", ""},
	{"1.2.3.4%eth0", ""},
	{"/var/run/envoy.sock", ""},
	{"garbage", ""},
	{"x:y", ""},
	{"0:0:0:0:0:0:0:0", "::"},
	{"0:0:1:0:0:1:0:0", "::1:0:0:1:0:0"},
	{"1:0:0:2:0:0:0:3", "1:0:0:2::3"},
	{"::ffff:0:0", "0.0.0.0"},
	{"::fffe:1.2.3.4", "::fffe:102:304"},
	{"0::ffff:1.2.3.4", "1.2.3.4"},
	{"[::ffff:1.2.3.4]", "1.2.3.4"},
	{"abcd:ef01:2345:6789:ABCD:EF01:2345:6789", "abcd:ef01:2345:6789:abcd:ef01:2345:6789"},
	{"::a.b.c.d", ""},
	{"::1.2.3", ""},
	{"::1.2.3.4.5", ""},
	{" ::1 ", "::1"},
	{"\t[::1]:1\t", "::1"},
	{"1.2.3.4:0080", "1.2.3.4"},
	{"::ffff:255.255.255.255", "255.255.255.255"},
	{"64:ff9b::192.0.2.33", "64:ff9b::c000:221"},
	{"192.0.2.1", "192.0.2.1"},
	{"192.0.2.1:5555", "192.0.2.1"},
	{"0.0.0.0", "0.0.0.0"},
	{"255.255.255.255:65535", "255.255.255.255"},
	{"1.2.3.4:0", "1.2.3.4"},
	{"1.2.3.4:65536", ""},
	{"1.2.3.4:", ""},
	{"1.2.3.4:+1", ""},
	{"1.2.3.4:-1", ""},
	{"256.1.1.1", ""},
	{"01.2.3.4", ""},
	{"1.2.3.04", ""},
	{"1.2.3", ""},
	{"1.2.3.4.5", ""},
	{"1..2.3", ""},
	{"1.2.3.1234", ""},
	{".1.2.3", ""},
	{"1.2.3.4 ", "1.2.3.4"},
	{" 1.2.3.4", "1.2.3.4"},
	{"1.2.3.4::80", ""},
	{"1.2.3.4:8a", ""},
	{"", ""},
	{":", ""},
	{"1.2.3.4:99999999999999999999", ""},
}

// parseIP reads each case as the table says, and parseIPText's text, when it gives one, is the
// address as it prints: a key part copies that text instead of printing the address.
func TestParseIP(t *testing.T) {
	for _, tc := range ipCases {
		checkParseIP(t, tc.in)
		ip, ok := parseIP(tc.in)
		got := ""
		if ok {
			got = ip.String()
		}
		if got != tc.want {
			t.Errorf("parseIP(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

// checkParseIP fails unless what parseIPText reads of s is normalised (no zone, not
// IPv4-mapped), prints as an address that parses back to itself, and comes with a text that
// is either "" or that printing.
func checkParseIP(t *testing.T, s string) {
	t.Helper()
	ip, text, ok := parseIPText(s)
	if !ok {
		if ip.IsValid() || text != "" {
			t.Fatalf("parseIPText(%q) refused it but returned %v, %q", s, ip, text)
		}
		return
	}
	if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() {
		t.Fatalf("parseIPText(%q) = %v: not normalised", s, ip)
	}
	if text != "" && text != ip.String() {
		t.Fatalf("parseIPText(%q) text %q, the address prints %q", s, text, ip.String())
	}
	if again, ok := parseIP(ip.String()); !ok || again != ip {
		t.Fatalf("parseIP(%q) = %v, %v; %q parsed to %v", ip.String(), again, ok, s, ip)
	}
}

func FuzzParseIP(f *testing.F) {
	for _, tc := range ipCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkParseIP(t, s)
		checkAsNetip(t, s)
	})
}

// parseIPNetip is what parseIPText reads, written with netip.ParseAddrPort for the forms with
// a port: parseIPText must read every string as it does.
func parseIPNetip(s string) (netip.Addr, string, bool) {
	s = strings.Trim(s, " \t")
	var ip netip.Addr
	var err error
	if i := strings.IndexByte(s, ':'); i >= 0 && strings.Count(s, ":") == 1 || strings.HasPrefix(s, "[") {
		var ap netip.AddrPort
		if ap, err = netip.ParseAddrPort(s); err == nil {
			if ip = ap.Addr(); ip.Is4() {
				return ip, s[:i], true
			}
		} else if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
			ip, err = netip.ParseAddr(s[1 : len(s)-1])
		} else {
			ip, err = netip.ParseAddr(s)
		}
	} else if ip, err = netip.ParseAddr(s); err == nil && ip.Is4() {
		return ip, s, true
	}
	if err != nil {
		return netip.Addr{}, "", false
	}
	return ip.Unmap().WithZone(""), "", true
}

func checkAsNetip(t *testing.T, s string) {
	t.Helper()
	ip, text, ok := parseIPText(s)
	wantIP, wantText, wantOK := parseIPNetip(s)
	if ip != wantIP || text != wantText || ok != wantOK {
		t.Fatalf("parseIPText(%q) = %v, %q, %v; netip.ParseAddrPort and ParseAddr read %v, %q, %v", s, ip, text, ok, wantIP, wantText, wantOK)
	}
}

// TestParseIPAsNetip compares parseIPText with netip's parsers on the table and on random
// strings of the characters addresses and ports are made of.
func TestParseIPAsNetip(t *testing.T) {
	for _, tc := range ipCases {
		checkAsNetip(t, tc.in)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const chars = "0123456789:::...[]%afF \t"
	for range 200_000 {
		b := make([]byte, r.IntN(24))
		for i := range b {
			b[i] = chars[r.IntN(len(chars))]
		}
		checkAsNetip(t, string(b))
	}
	for _, s := range []string{"1.2.3.4:65535", "[::1]:65535", "1.2.3.4:00000000000000000080", "[::1]:65536", "[1.2.3.4]:1"} {
		checkAsNetip(t, s)
	}
}

// The usual source addresses, IPv4 with and without a port, come with their text, so that
// the unmasked key part is a copy of it.
func TestParseIPTextOfIPv4(t *testing.T) {
	for _, s := range []string{"192.0.2.1", "192.0.2.1:5555", "0.0.0.0", "255.255.255.255:65535",
		"1.2.3.4:0", "1.2.3.4:0080", " 1.2.3.4\t"} {
		if ip, text, ok := parseIPText(s); !ok || text == "" || text != ip.String() {
			t.Errorf("parseIPText(%q) = %v, %q, %v; want the address with its text", s, ip, text, ok)
		}
	}
}

// A client-IP key part writes the address masked to the configured prefix, with "/bits",
// unless the prefix covers the whole address; an IPv4-mapped address is masked as the IPv4
// address it is.
func TestAppendIP(t *testing.T) {
	cases := []struct {
		addr string
		bits int
		want string
	}{
		{"192.0.2.77", 0, "0.0.0.0/0"},
		{"192.0.2.77", 1, "128.0.0.0/1"},
		{"192.0.2.77", 7, "192.0.0.0/7"},
		{"192.0.2.77", 8, "192.0.0.0/8"},
		{"192.0.2.77", 24, "192.0.2.0/24"},
		{"192.0.2.77", 31, "192.0.2.76/31"},
		{"192.0.2.77", 32, "192.0.2.77"},
		{"192.0.2.77", 129, "192.0.2.77"},
		{"2001:db8:1:2:3:4:5:6", 0, "::/0"},
		{"2001:db8:1:2:3:4:5:6", 1, "::/1"},
		{"2001:db8:1:2:3:4:5:6", 7, "2000::/7"},
		{"2001:db8:1:2:3:4:5:6", 8, "2000::/8"},
		{"2001:db8:1:2:3:4:5:6", 24, "2001:d00::/24"},
		{"2001:db8:1:2:3:4:5:6", 31, "2001:db8::/31"},
		{"2001:db8:1:2:3:4:5:6", 32, "2001:db8::/32"},
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 96, "2001:db8:1:2:3:4::/96"},
		{"2001:db8:1:2:3:4:5:6", 127, "2001:db8:1:2:3:4:5:6/127"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"},
		{"2001:db8:1:2:3:4:5:6", 129, "2001:db8:1:2:3:4:5:6"},
		{"::ffff:10.1.2.3", 24, "10.1.2.0/24"},
		{"::ffff:10.1.2.3", 32, "10.1.2.3"},
		{"::ffff:10.1.2.3", 96, "10.1.2.3"},
		{"::ffff:10.1.2.3", 128, "10.1.2.3"},
		{"255.255.255.255", 0, "0.0.0.0/0"},
		{"255.255.255.255", 24, "255.255.255.0/24"},
		{"255.255.255.255", 31, "255.255.255.254/31"},
		{"255.255.255.255", 32, "255.255.255.255"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0, "::/0"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1, "8000::/1"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 7, "fe00::/7"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 8, "ff00::/8"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 24, "ffff:ff00::/24"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 31, "ffff:fffe::/31"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 32, "ffff:ffff::/32"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 48, "ffff:ffff:ffff::/48"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 64, "ffff:ffff:ffff:ffff::/64"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 96, "ffff:ffff:ffff:ffff:ffff:ffff::/96"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 127, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 128, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 129, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		{"::", 0, "::/0"},
		{"::", 127, "::/127"},
		{"::", 128, "::"},
	}
	for _, tc := range cases {
		ip, ok := parseIP(tc.addr)
		if !ok {
			t.Fatalf("parseIP(%q) refused it", tc.addr)
		}
		kp := KeyPart{IPv4Prefix: tc.bits, IPv6Prefix: tc.bits}
		if got := string(kp.appendIP(nil, ip)); got != tc.want {
			t.Errorf("%s masked to %d = %q, want %q", tc.addr, tc.bits, got, tc.want)
		}
	}
}
