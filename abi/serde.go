package abi

import (
	"encoding/binary"
	"unsafe"
)

// encodeHeaders serialises header pairs in the proxy-wasm map encoding: a little-endian u32
// count N, then N pairs of u32 key and value lengths, then each key and value followed by a NUL
// byte. An empty map is still four bytes (a zero count), because hosts (and the SDK's
// emulator) treat a zero-length map buffer differently from an empty map.
func encodeHeaders(pairs [][2]string) []byte {
	size := 4
	for _, p := range pairs {
		size += 8 + len(p[0]) + 1 + len(p[1]) + 1
	}
	buf := make([]byte, size)
	binary.LittleEndian.PutUint32(buf, uint32(len(pairs)))
	lens := buf[4:]
	data := buf[4+8*len(pairs):]
	for _, p := range pairs {
		binary.LittleEndian.PutUint32(lens, uint32(len(p[0])))
		binary.LittleEndian.PutUint32(lens[4:], uint32(len(p[1])))
		lens = lens[8:]
		n := copy(data, p[0])
		data[n] = 0
		data = data[n+1:]
		n = copy(data, p[1])
		data[n] = 0
		data = data[n+1:]
	}
	return buf
}

// scanHeaderLines finds the lines of header key in an encoded header map (the layout
// decodeHeaders reads) and returns the first and last value, sharing buf's bytes, and their
// count. A malformed map yields what was found before the malformation.
//
// The lengths are read from the front of a shrinking slice, eight bytes at a time, so that
// the compiler can prove most bounds: V8 in Envoy compiles this on a VM's first request, and
// every bounds check is a branch with a call of its own in the compiled code.
func scanHeaderLines(buf []byte, key string) (first, last string, n int) {
	if len(buf) < 4 {
		return "", "", 0
	}
	count := uint64(binary.LittleEndian.Uint32(buf))
	if count*8 > uint64(len(buf)-4) {
		return "", "", 0
	}
	lens := buf[4 : 4+8*count]
	data := buf[4+8*count:]
	for len(lens) >= 8 {
		kl := uint64(binary.LittleEndian.Uint32(lens))
		vl := uint64(binary.LittleEndian.Uint32(lens[4:8]))
		lens = lens[8:]
		if kl+1+vl+1 > uint64(len(data)) {
			return first, last, n
		}
		if kl == uint64(len(key)) && string(data[:kl]) == key {
			v := data[kl+1 : kl+1+vl]
			s := unsafe.String(unsafe.SliceData(v), len(v))
			if n == 0 {
				first = s
			}
			last = s
			n++
		}
		data = data[kl+1+vl+1:]
	}
	return first, last, n
}

// appendPath appends the path segments to buf, joined with NUL bytes (see PropertyPath).
func appendPath(buf []byte, path []string) []byte {
	for i, s := range path {
		if i > 0 {
			buf = append(buf, 0)
		}
		buf = append(buf, s...)
	}
	return buf
}

// PropertyPath is a host property's path, such as {"source", "address"}, in the form
// proxy_get_property takes: the segments joined with NUL bytes ("source\x00address"). A
// constant of this type is encoded by the compiler: a path encoded per read would be encoded
// in code V8 in Envoy compiles on a VM's first request, and one encoded by a package variable's
// initialiser would be encoded, and compiled, in _initialize.
type PropertyPath string

// HeaderMap is a request's whole header map as one proxy_get_header_map_pairs call returns
// it, in the proxy-wasm map encoding: Lines and Joined answer lookups of any header from it
// without another host call, with strings that share the map's bytes, which belong to the
// HeaderMap alone and are never written again.
type HeaderMap struct{ buf []byte }

// Lines returns the first and last line of header key (lower-case) and how many lines the
// map holds (proxy_get_header_map_value returns only the first line of a repeated header).
func (m HeaderMap) Lines(key string) (first, last string, n int) {
	return scanHeaderLines(m.buf, key)
}

// Joined returns every line of header key joined by ",", as Envoy joins the lines of a header
// it folds, and whether the map holds the header at all. A header of one line is returned
// without a copy.
func (m HeaderMap) Joined(key string) (string, bool) {
	first, _, n := scanHeaderLines(m.buf, key)
	if n <= 1 {
		return first, n == 1
	}
	return joinHeaderLines(m.buf, key), true
}

// joinHeaderLines joins the lines of header key in an encoded header map with ",".
func joinHeaderLines(buf []byte, key string) string {
	count := binary.LittleEndian.Uint32(buf)
	lens := buf[4 : 4+8*int(count)]
	data := buf[4+8*int(count):]
	var out []byte
	found := false
	for i := 0; i < int(count); i++ {
		kl := uint64(binary.LittleEndian.Uint32(lens[8*i:]))
		vl := uint64(binary.LittleEndian.Uint32(lens[8*i+4:]))
		if kl+1+vl+1 > uint64(len(data)) {
			break
		}
		if string(data[:kl]) == key {
			if found {
				out = append(out, ',')
			}
			out = append(out, data[kl+1:kl+1+vl]...)
			found = true
		}
		data = data[kl+1+vl+1:]
	}
	return string(out)
}
