package config

import (
	"net/netip"
	"strings"
)

// parseIPText reads a client address with or without a port, normalised: no zone, an
// IPv4-mapped IPv6 address unmapped, so that one client always yields one address. It also
// returns the address as s writes it when that is already the form netip.Addr.AppendTo
// writes (an IPv4 address without brackets, which netip.ParseAddr accepts only in canonical
// form), so that a key part can copy those bytes; for any other address text is "".
//
// It accepts what netip.ParseAddrPort accepts, "ipv4:port" and "[ipv6]:port", what
// netip.ParseAddr accepts, and "[address]", with blanks around. The port is checked by
// validPort rather than ParseAddrPort, whose strconv.ParseUint is 7.8 KB of code V8 in Envoy
// compiles on a VM's first request (scripts/v8-compile-phases.sh), 11% of that request's. The
// form is told apart first and the address read by one ParseAddr call: each call site, with
// the checks inlined after it, is code of its own to compile.
func parseIPText(s string) (ip netip.Addr, text string, ok bool) {
	if len(s) > 0 && (isBlank(s[0]) || isBlank(s[len(s)-1])) {
		s = trimBlanks(s)
	}
	const (
		bare      = iota // an address alone: its text is s when it is IPv4
		ipv4Port         // "ipv4:port": its text is the address
		v6Port           // "[ipv6]:port": an IPv4 address in brackets has no port
		bracketed        // "[address]"
	)
	addr, form := s, bare
	// One colon: IndexByte, which is compiled already, rather than strings.Count.
	i := strings.IndexByte(s, ':')
	switch {
	case i >= 0 && strings.IndexByte(s[i+1:], ':') < 0:
		// No IPv6 address has one colon: an IPv4 address and a port, or nothing.
		if !validPort(s[i+1:]) {
			return netip.Addr{}, "", false
		}
		addr, form = s[:i], ipv4Port
	case len(s) > 0 && s[0] == '[':
		if i = strings.LastIndexByte(s, ':'); i > 1 && s[i-1] == ']' && validPort(s[i+1:]) {
			addr, form = s[1:i-1], v6Port
		} else if len(s) > 2 && s[len(s)-1] == ']' {
			addr, form = s[1:len(s)-1], bracketed
		} else {
			return netip.Addr{}, "", false
		}
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil || form == ipv4Port && !ip.Is4() || form == v6Port && ip.Is4() {
		return netip.Addr{}, "", false
	}
	if ip.Is4() && form <= ipv4Port {
		return ip, addr, true
	}
	return ip.Unmap().WithZone(""), "", true
}

// validPort reports whether netip.ParseAddrPort accepts port: decimal digits (leading zeros
// allowed) of a value at most 65535.
func validPort(port string) bool {
	n := 0
	for i := 0; i < len(port); i++ {
		d := int(port[i]) - '0'
		if d < 0 || d > 9 {
			return false
		}
		if n = n*10 + d; n > 65535 {
			return false
		}
	}
	return port != ""
}

func trimBlanks(s string) string { return strings.Trim(s, " \t") }
