package config

import (
	"net/netip"
	"strings"
	"testing"
)

// netipParse is the client-IP parse as the filter made it with net/netip before it had its
// own parser: ParseAddrPort for "ip:port" and anything in brackets, ParseAddr otherwise, the
// other parse for what fails, then the zone dropped and an IPv4-mapped address unmapped.
func netipParse(s string) (netip.Addr, bool) {
	if len(s) > 0 && (isBlank(s[0]) || isBlank(s[len(s)-1])) {
		s = strings.Trim(s, " \t")
	}
	var ip netip.Addr
	var err error
	if strings.Count(s, ":") == 1 || (len(s) > 0 && s[0] == '[') {
		var ap netip.AddrPort
		if ap, err = netip.ParseAddrPort(s); err == nil {
			ip = ap.Addr()
		}
	} else {
		ip, err = netip.ParseAddr(s)
	}
	if err != nil {
		if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
			ip, err = netip.ParseAddr(s[1 : len(s)-1])
		} else {
			ip, err = netip.ParseAddr(s)
		}
		if err != nil {
			return netip.Addr{}, false
		}
	}
	return ip.Unmap().WithZone(""), true
}

// checkParseIPAsNetip fails unless parseIP accepts exactly what netipParse accepts, with the
// same address, printed the same.
func checkParseIPAsNetip(t *testing.T, s string) {
	t.Helper()
	got, ok := parseIP(s)
	want, wantOK := netipParse(s)
	if ok != wantOK {
		t.Fatalf("parseIP(%q) ok = %v, net/netip says %v (%v)", s, ok, wantOK, want)
	}
	if !ok {
		return
	}
	if got.Is4() != want.Is4() || got.String() != want.String() {
		t.Fatalf("parseIP(%q) = %s (v4 %v), net/netip gives %s (v4 %v)", s, got, got.Is4(), want, want.Is4())
	}
	if want.Is4() && [4]byte(got.b[:4]) != want.As4() || !want.Is4() && got.b != want.As16() {
		t.Fatalf("parseIP(%q) bytes %v, net/netip %v", s, got.b, want.AsSlice())
	}
}

var ipShapes = append([]string{
	"::", "::1", "1::", "2001:db8::1", "2001:DB8:0:0::1", "[2001:db8::1]", "[2001:db8::1]:8080",
	"[2001:db8::1]:", "[2001:db8::1]:65536", "2001:db8::1:80", "fe80::1%eth0", "fe80::1%",
	"[fe80::1%eth0]:443", "%eth0", "::ffff:1.2.3.4", "[::ffff:192.0.2.7]:443", "::1.2.3.4",
	"1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:7:1.2.3.4", "1:2:3:4:5:1.2.3.4", "::ffff:01.2.3.4",
	"1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7::", "::1:2:3:4:5:6:7", "1::2::3",
	"12345::", "1:::2", ":1", "1:", "[]", "[]:80", "[::1", "::1]", "[1.2.3.4]", "[1.2.3.4]:80",
	"1.2.3.4%eth0", "/var/run/envoy.sock", "garbage", "x:y", "0:0:0:0:0:0:0:0", "0:0:1:0:0:1:0:0",
	"1:0:0:2:0:0:0:3", "::ffff:0:0", "::fffe:1.2.3.4", "0::ffff:1.2.3.4", "[::ffff:1.2.3.4]",
	"abcd:ef01:2345:6789:ABCD:EF01:2345:6789", "::a.b.c.d", "::1.2.3", "::1.2.3.4.5", " ::1 ",
	"\t[::1]:1\t", "1.2.3.4:0080", "::ffff:255.255.255.255", "64:ff9b::192.0.2.33",
}, ipv4Shapes...)

func TestParseIPAsNetip(t *testing.T) {
	for _, s := range ipShapes {
		checkParseIPAsNetip(t, s)
	}
}

func FuzzParseIPAsNetip(f *testing.F) {
	for _, s := range ipShapes {
		f.Add(s)
	}
	f.Fuzz(checkParseIPAsNetip)
}

// checkAppendIPAsNetip fails unless an address, and the address masked to bits, print as
// net/netip prints them (the masked one as Prefix(bits).Addr(), with "/bits").
func checkAppendIPAsNetip(t *testing.T, b []byte, v4 bool, bits int) {
	t.Helper()
	var ip IP
	copy(ip.b[:], b)
	var want netip.Addr
	if v4 {
		ip = IP{v4: true}
		copy(ip.b[:4], b)
		want = netip.AddrFrom4([4]byte(ip.b[:4]))
	} else {
		want = netip.AddrFrom16(ip.b)
	}
	if got := ip.String(); got != want.String() {
		t.Fatalf("%v (v4 %v) prints %q, net/netip %q", b, v4, got, want)
	}
	kp := KeyPart{IPv4Prefix: bits, IPv6Prefix: bits}
	wantMasked := want.String()
	if pfx, err := want.Prefix(bits); err == nil && bits < want.BitLen() {
		wantMasked = pfx.Addr().String() + "/" + itoa(bits)
	}
	if got := string(kp.appendIP(nil, ip)); got != wantMasked {
		t.Fatalf("%v (v4 %v) masked to %d prints %q, net/netip %q", b, v4, bits, got, wantMasked)
	}
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(dst []byte, n int) []byte {
	if n >= 10 {
		dst = appendInt(dst, n/10)
	}
	return append(dst, byte('0'+n%10))
}

func TestAppendIPAsNetip(t *testing.T) {
	addrs := [][]byte{
		make([]byte, 16), {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4},
		{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1},
		{0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3}, {192, 0, 2, 1},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	}
	for _, a := range addrs {
		for _, bits := range []int{0, 1, 7, 8, 24, 31, 32, 48, 64, 96, 127, 128, 129} {
			checkAppendIPAsNetip(t, a, len(a) == 4, bits)
		}
	}
}

func FuzzAppendIPAsNetip(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4}, false, 96)
	f.Add([]byte{192, 0, 2, 1}, true, 24)
	f.Add([]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1}, false, 48)
	f.Fuzz(func(t *testing.T, b []byte, v4 bool, bits int) {
		if bits < 0 || bits > 200 {
			return
		}
		checkAppendIPAsNetip(t, b, v4, bits)
	})
}
