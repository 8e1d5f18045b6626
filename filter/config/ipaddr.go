package config

import (
	"net/netip"
	"strings"
)

// parseIPText reads a client address with or without a port, normalised: no zone, an
// IPv4-mapped IPv6 address unmapped to its IPv4 address, so that one client always yields one
// address. It also returns the address as s writes it when that is already the form
// netip.Addr.AppendTo writes: an IPv4 address written without brackets (with or without a
// port), which netip.ParseAddr accepts only in canonical dotted decimal (no leading zeros). A
// key part can then copy those bytes instead of printing the address. For any other address
// text is "".
//
// "ip:port" (one colon, source.address's form) and anything in brackets are read with
// netip.ParseAddrPort, anything else with netip.ParseAddr; a string of the first shapes that
// is not an address with a port is then read as an address alone (the brackets' content for
// "[ipv6]"), so that the result never depends on which shape was tried first. Blanks around
// the address are dropped.
func parseIPText(s string) (ip netip.Addr, text string, ok bool) {
	if len(s) > 0 && (isBlank(s[0]) || isBlank(s[len(s)-1])) {
		s = trimBlanks(s)
	}
	var err error
	// One colon (strings.Count would say so too, but it is code V8 in Envoy compiles on a VM's
	// first request, while IndexByte is compiled already).
	if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 || len(s) > 0 && s[0] == '[' {
		var ap netip.AddrPort
		if ap, err = netip.ParseAddrPort(s); err == nil {
			// An IPv4 address with a port has no brackets: s[:i] is the address.
			if ip = ap.Addr(); ip.Is4() {
				return ip, s[:i], true
			}
		} else if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
			ip, err = netip.ParseAddr(s[1 : len(s)-1])
		} else {
			ip, err = netip.ParseAddr(s)
		}
	} else {
		ip, err = netip.ParseAddr(s)
		if err == nil && ip.Is4() {
			return ip, s, true
		}
	}
	if err != nil {
		return netip.Addr{}, "", false
	}
	return ip.Unmap().WithZone(""), "", true
}

// trimBlanks strips the blanks around an address.
func trimBlanks(s string) string { return strings.Trim(s, " \t") }
