package config

import "strings"

// IP is a client address as the client-IP key uses it: IPv4 or IPv6, without a zone, an
// IPv4-mapped IPv6 address unmapped to its IPv4 address (see ClientIP). The zero value is the
// IPv6 address "::"; ClientIP's ok result says whether an address was found.
//
// The filter parses and prints addresses itself rather than with net/netip: the request path
// then stays free of netip's interned zones (a pointer in every address, which makes clearing
// a request's cache a write-barriered copy), and the module does not link the package. What
// parseIP accepts and what AppendTo prints are exactly what netip.ParseAddr,
// netip.ParseAddrPort and netip.Addr.AppendTo accept and print (FuzzParseIPAsNetip and
// FuzzAppendIPAsNetip compare them natively).
type IP struct {
	// b holds the address: an IPv4 address in b[:4], an IPv6 address in all 16 bytes.
	b  [16]byte
	v4 bool
}

// Is4 reports whether the address is an IPv4 address.
func (ip IP) Is4() bool { return ip.v4 }

// BitLen returns the address's length in bits: 32 for IPv4, 128 for IPv6.
func (ip IP) BitLen() int {
	if ip.v4 {
		return 32
	}
	return 128
}

// String returns the address as AppendTo writes it.
func (ip IP) String() string { return string(ip.AppendTo(nil)) }

// AppendTo appends the address in its canonical form, as netip.Addr.AppendTo writes it:
// dotted decimal for IPv4; for IPv6 (RFC 5952) lower-case hexadecimal groups without leading
// zeros, the longest run of two or more zero groups (the first of equal runs) written "::",
// and an IPv4-mapped address as "::ffff:" and the dotted IPv4 address.
func (ip IP) AppendTo(dst []byte) []byte {
	if ip.v4 {
		return appendDotted(dst, ip.b[:4])
	}
	if ip.is4In6() {
		return appendDotted(append(dst, "::ffff:"...), ip.b[12:])
	}
	zeroStart, zeroEnd := 255, 255
	for i := 0; i < 8; i++ {
		j := i
		for j < 8 && ip.group(j) == 0 {
			j++
		}
		if l := j - i; l >= 2 && l > zeroEnd-zeroStart {
			zeroStart, zeroEnd = i, j
		}
	}
	for i := 0; i < 8; i++ {
		if i == zeroStart {
			dst = append(dst, ':', ':')
			i = zeroEnd
			if i >= 8 {
				break
			}
		} else if i > 0 {
			dst = append(dst, ':')
		}
		dst = appendHex16(dst, ip.group(i))
	}
	return dst
}

// group returns the i-th 16-bit group of an IPv6 address.
func (ip IP) group(i int) uint16 { return uint16(ip.b[2*i])<<8 | uint16(ip.b[2*i+1]) }

// is4In6 reports whether an IPv6 address is an IPv4-mapped one (::ffff:a.b.c.d).
func (ip IP) is4In6() bool {
	return !ip.v4 && ip.b[10] == 0xff && ip.b[11] == 0xff &&
		[10]byte(ip.b[:10]) == [10]byte{}
}

// unmap returns the IPv4 address an IPv4-mapped IPv6 address maps, and any other address
// as it is.
func (ip IP) unmap() IP {
	if !ip.is4In6() {
		return ip
	}
	var u IP
	u.v4 = true
	copy(u.b[:4], ip.b[12:])
	return u
}

// masked returns the address with every bit after the first bits cleared (0 <= bits <=
// BitLen()).
func (ip IP) masked(bits int) IP {
	n := 16
	if ip.v4 {
		n = 4
	}
	for i := 0; i < n; i++ {
		switch {
		case bits >= 8:
			bits -= 8
		case bits > 0:
			ip.b[i] &= ^byte(0xff >> bits)
			bits = 0
		default:
			ip.b[i] = 0
		}
	}
	return ip
}

// appendDotted appends a 4-byte IPv4 address in dotted decimal.
func appendDotted(dst []byte, a []byte) []byte {
	for i, x := range a[:4] {
		if i > 0 {
			dst = append(dst, '.')
		}
		if x >= 100 {
			dst = append(dst, '0'+x/100)
		}
		if x >= 10 {
			dst = append(dst, '0'+x/10%10)
		}
		dst = append(dst, '0'+x%10)
	}
	return dst
}

// ipHexDigits are the digits of an IPv6 group, lower-case as RFC 5952 writes them.
const ipHexDigits = "0123456789abcdef"

// appendHex16 appends x in lower-case hexadecimal without leading zeros.
func appendHex16(dst []byte, x uint16) []byte {
	if x >= 0x1000 {
		dst = append(dst, ipHexDigits[x>>12])
	}
	if x >= 0x100 {
		dst = append(dst, ipHexDigits[x>>8&0xf])
	}
	if x >= 0x10 {
		dst = append(dst, ipHexDigits[x>>4&0xf])
	}
	return append(dst, ipHexDigits[x&0xf])
}

// parseIP reads an address with or without a port, normalised: no zone, IPv4-mapped IPv6
// unmapped.
func parseIP(s string) (IP, bool) {
	ip, _, ok := parseIPText(s)
	return ip, ok
}

// parseIPText is parseIP that also returns the address as s writes it when that is already
// the form AppendTo writes: an IPv4 address that the fast path below read ("a.b.c.d", with or
// without a port) is written in canonical decimal, since the fast path refuses leading zeros.
// A key part can then copy those bytes instead of printing the address. For any other address
// text is "".
//
// The fast path reads the shapes that nearly every address has, "a.b.c.d" and
// "a.b.c.d:port", and accepts exactly what netip.ParseAddr and netip.ParseAddrPort accept of
// them: four decimal octets up to 255 without leading zeros, and a port of decimal digits up
// to 65535 (leading zeros allowed, as strconv.ParseUint allows them). Anything else takes the
// general path, parseAddr. In a Wasm VM the general path costs about a microsecond per
// request, this one a fraction of that. The fast path is written here rather than in a
// function of its own: the source address is then read once, by one function, and where the
// address ends is known without searching s again for the port.
func parseIPText(s string) (ip IP, text string, ok bool) {
	if len(s) > 0 && (isBlank(s[0]) || isBlank(s[len(s)-1])) {
		s = trimBlanks(s)
	}
	{
		// Every refusal jumps to the one call of the general path below: each call site is
		// code of its own in Go's wasm backend.
		a, i := ip.b[:4], 0
		for f := range a {
			if f > 0 {
				if i >= len(s) || s[i] != '.' {
					goto slow
				}
				i++
			}
			start, v := i, 0
			for i < len(s) && i-start < 3 && s[i] >= '0' && s[i] <= '9' {
				v = v*10 + int(s[i]-'0')
				i++
			}
			if n := i - start; n == 0 || v > 255 || (n > 1 && s[start] == '0') {
				goto slow
			}
			a[f] = byte(v)
		}
		end := i
		if i < len(s) {
			if s[i] != ':' || i+1 == len(s) {
				goto slow
			}
			port := 0
			for i++; i < len(s); i++ {
				if s[i] < '0' || s[i] > '9' {
					goto slow
				}
				if port = port*10 + int(s[i]-'0'); port > 65535 {
					goto slow
				}
			}
		}
		ip.v4 = true
		return ip, s[:end], true
	}
slow:
	return parseSlow(s)
}

// trimBlanks strips the blanks around an address. It is kept out of line, as is parseSlow:
// V8 in Envoy compiles a function on its first call, and a source address has no blanks.
//
//go:noinline
func trimBlanks(s string) string { return strings.Trim(s, " \t") }

// parseSlow is parseIPText for an address the fast path does not read (already trimmed).
//
//go:noinline
func parseSlow(s string) (IP, string, bool) {
	ip, ok := parseAddr(s)
	return ip, "", ok
}

// parseAddr is parseIP's general path, for an address of any shape (already trimmed). It
// accepts what netip.ParseAddrPort accepts for "ip:port" (source.address, one colon) and for
// anything in brackets, and what netip.ParseAddr accepts otherwise; a string of the first
// shapes that is not an address with a port is then given the other parse, so that the
// result never depends on which shape was guessed first.
func parseAddr(s string) (IP, bool) {
	var ip IP
	var ok bool
	if strings.Count(s, ":") == 1 || (len(s) > 0 && s[0] == '[') {
		ip, ok = parseAddrPort(s)
	} else {
		ip, ok = parseAddrOnly(s)
	}
	if !ok {
		if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
			ip, ok = parseAddrOnly(s[1 : len(s)-1])
		} else {
			ip, ok = parseAddrOnly(s)
		}
		if !ok {
			return IP{}, false
		}
	}
	// The zone was dropped by the parse.
	return ip.unmap(), true
}

// parseAddrPort accepts what netip.ParseAddrPort accepts: "a.b.c.d:port" or "[ipv6]:port",
// the port decimal digits up to 65535 (leading zeros allowed, as strconv.ParseUint allows
// them). The port is checked and dropped.
func parseAddrPort(s string) (IP, bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return IP{}, false
	}
	host, port := s[:i], s[i+1:]
	if host == "" || port == "" {
		return IP{}, false
	}
	bracketed := false
	if host[0] == '[' {
		if len(host) < 2 || host[len(host)-1] != ']' {
			return IP{}, false
		}
		host, bracketed = host[1:len(host)-1], true
	}
	p := 0
	for j := 0; j < len(port); j++ {
		c := port[j]
		if c < '0' || c > '9' {
			return IP{}, false
		}
		if p = p*10 + int(c-'0'); p > 65535 {
			return IP{}, false
		}
	}
	ip, ok := parseAddrOnly(host)
	// Brackets are for IPv6 addresses, and an IPv6 address needs them before a port.
	if !ok || bracketed == ip.v4 {
		return IP{}, false
	}
	return ip, true
}

// parseAddrOnly accepts what netip.ParseAddr accepts: the first '.', ':' or '%' decides
// between IPv4 and IPv6 (a zone needs an IPv6 address before it). The zone of an IPv6
// address is dropped; an IPv4-mapped address is kept as IPv6 (ParseAddrPort tells the two
// apart), parseAddr unmaps it.
func parseAddrOnly(s string) (IP, bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.':
			var ip IP
			ip.v4 = true
			return ip, parseIPv4Fields(s, ip.b[:4])
		case ':':
			return parseIPv6(s)
		case '%':
			return IP{}, false
		}
	}
	return IP{}, false
}

// parseIPv4Fields reads a dotted IPv4 address into dst[:4] as netip's parser does: four
// decimal fields, each at least one digit, at most 255 and without a leading zero.
func parseIPv4Fields(s string, dst []byte) bool {
	val, pos, digits := 0, 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 {
				return false // a leading zero
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return false
			}
		case c == '.':
			if i == 0 || i == len(s)-1 || s[i-1] == '.' || pos == 3 {
				return false
			}
			dst[pos] = byte(val)
			pos++
			val, digits = 0, 0
		default:
			return false
		}
	}
	if pos < 3 {
		return false
	}
	dst[3] = byte(val)
	return true
}

// parseIPv6 reads an IPv6 address as netip's parser does: up to eight groups of one to four
// hexadecimal digits separated by colons, at most one "::" standing for at least one group of
// zeros, optionally a dotted IPv4 address as the last 32 bits, and optionally a non-empty
// zone after '%', which is dropped.
func parseIPv6(in string) (IP, bool) {
	s := in
	if i := strings.IndexByte(s, '%'); i >= 0 {
		if i == len(s)-1 {
			return IP{}, false // an empty zone
		}
		s = s[:i]
	}
	var ip IP
	ellipsis := -1 // where "::" stands, in bytes of ip.b
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		ellipsis = 0
		s = s[2:]
		if len(s) == 0 {
			return ip, true // "::"
		}
	}
	i := 0
	for i < 16 {
		off, acc := 0, uint32(0)
	digits:
		for ; off < len(s); off++ {
			c := s[off]
			switch {
			case c >= '0' && c <= '9':
				acc = acc<<4 + uint32(c-'0')
			case c >= 'a' && c <= 'f':
				acc = acc<<4 + uint32(c-'a'+10)
			case c >= 'A' && c <= 'F':
				acc = acc<<4 + uint32(c-'A'+10)
			default:
				break digits
			}
			if off > 3 || acc > 0xffff {
				return IP{}, false // more than four digits
			}
		}
		if off == 0 {
			return IP{}, false
		}
		if off < len(s) && s[off] == '.' {
			// A trailing IPv4 address: only as the last 32 bits.
			if (ellipsis < 0 && i != 12) || i+4 > 16 {
				return IP{}, false
			}
			if !parseIPv4Fields(s, ip.b[i:i+4]) {
				return IP{}, false
			}
			s = ""
			i += 4
			break
		}
		ip.b[i], ip.b[i+1] = byte(acc>>8), byte(acc)
		i += 2
		s = s[off:]
		if len(s) == 0 {
			break
		}
		if s[0] != ':' || len(s) == 1 {
			return IP{}, false
		}
		s = s[1:]
		if s[0] == ':' {
			if ellipsis >= 0 {
				return IP{}, false // a second "::"
			}
			ellipsis = i
			s = s[1:]
			if len(s) == 0 {
				break
			}
		}
	}
	if len(s) != 0 {
		return IP{}, false
	}
	if i < 16 {
		if ellipsis < 0 {
			return IP{}, false // too short
		}
		n := 16 - i
		for j := i - 1; j >= ellipsis; j-- {
			ip.b[j+n] = ip.b[j]
		}
		clear(ip.b[ellipsis : ellipsis+n])
	} else if ellipsis >= 0 {
		return IP{}, false // "::" standing for no group
	}
	return ip, true
}
