package wasmhost

import (
	"encoding/binary"
	"strings"
)

// Limits cpp-host applies when it decodes a serialized map coming from the
// guest (PROXY_WASM_HOST_PAIRS_MAX_COUNT / _MAX_BYTES): anything larger is
// treated as an empty map, not as an error.
const (
	maxPairsCount = 1024
	maxPairsBytes = 1 << 20
)

// headerMap is an ordered multimap with Envoy's rules: keys are lower-cased
// on insertion and pseudo-headers (":...") stay in front of regular headers.
type headerMap struct {
	kv [][2]string
}

func newHeaderMap(pairs [][2]string) *headerMap {
	m := &headerMap{kv: make([][2]string, 0, len(pairs)+4)}
	for _, p := range pairs {
		m.add(p[0], p[1])
	}
	return m
}

// pairs returns a copy of the entries.
func (m *headerMap) pairs() [][2]string {
	out := make([][2]string, len(m.kv))
	copy(out, m.kv)
	return out
}

func (m *headerMap) size() int { return len(m.kv) }

// byteSize is Envoy's HeaderMap::byteSize(): the sum of key and value lengths.
func (m *headerMap) byteSize() uint32 {
	n := 0
	for _, p := range m.kv {
		n += len(p[0]) + len(p[1])
	}
	return uint32(n)
}

func (m *headerMap) get(key string) (string, bool) {
	key = strings.ToLower(key)
	for _, p := range m.kv {
		if p[0] == key {
			return p[1], true
		}
	}
	return "", false
}

// fold appends value to the existing entry for key with a "," in between, in place, as
// Envoy's header map does for the headers it indexes inline. It reports false, changing
// nothing, when there is no such entry.
func (m *headerMap) fold(key, value string) bool {
	key = strings.ToLower(key)
	for i := range m.kv {
		if m.kv[i][0] == key {
			m.kv[i][1] += "," + value
			return true
		}
	}
	return false
}

// add appends an entry; a pseudo-header is inserted after the last existing
// pseudo-header, as Envoy's HeaderMapImpl keeps them first.
func (m *headerMap) add(key, value string) {
	key = strings.ToLower(key)
	if strings.HasPrefix(key, ":") {
		i := 0
		for i < len(m.kv) && strings.HasPrefix(m.kv[i][0], ":") {
			i++
		}
		m.kv = append(m.kv, [2]string{})
		copy(m.kv[i+1:], m.kv[i:])
		m.kv[i] = [2]string{key, value}
		return
	}
	m.kv = append(m.kv, [2]string{key, value})
}

// remove deletes every entry with the key.
func (m *headerMap) remove(key string) {
	key = strings.ToLower(key)
	out := m.kv[:0]
	for _, p := range m.kv {
		if p[0] != key {
			out = append(out, p)
		}
	}
	for i := len(out); i < len(m.kv); i++ {
		m.kv[i] = [2]string{}
	}
	m.kv = out
}

// replace is Envoy's setCopy with the "replace all" behaviour of current
// releases: every entry with the key is removed and one entry is added.
func (m *headerMap) replace(key, value string) {
	m.remove(key)
	m.add(key, value)
}

// setAll replaces the whole map (proxy_set_header_map_pairs).
func (m *headerMap) setAll(pairs [][2]string) {
	m.kv = m.kv[:0]
	for _, p := range pairs {
		m.add(p[0], p[1])
	}
}

// pairsSize is the length of the serialized form of pairs.
func pairsSize(pairs [][2]string) int {
	n := 4
	for _, p := range pairs {
		n += 8 + len(p[0]) + 1 + len(p[1]) + 1
	}
	return n
}

// marshalPairs writes the proxy-wasm map encoding into dst, which must be
// pairsSize(pairs) long: u32 count, count x (u32 key_len, u32 value_len),
// then each key and value NUL-terminated; little-endian.
func marshalPairs(dst []byte, pairs [][2]string) {
	binary.LittleEndian.PutUint32(dst, uint32(len(pairs)))
	pos := 4
	for _, p := range pairs {
		binary.LittleEndian.PutUint32(dst[pos:], uint32(len(p[0])))
		binary.LittleEndian.PutUint32(dst[pos+4:], uint32(len(p[1])))
		pos += 8
	}
	for _, p := range pairs {
		pos += copy(dst[pos:], p[0])
		dst[pos] = 0
		pos++
		pos += copy(dst[pos:], p[1])
		dst[pos] = 0
		pos++
	}
}

// EncodePairs serializes pairs in the proxy-wasm map encoding. Tests use it to
// build inputs; the host uses marshalPairs directly into guest memory.
func EncodePairs(pairs [][2]string) []byte {
	b := make([]byte, pairsSize(pairs))
	marshalPairs(b, pairs)
	return b
}

// DecodePairs parses the proxy-wasm map encoding exactly like cpp-host's
// PairsUtil::toPairs: any malformation, more than 1024 pairs or more than
// 1 MiB yields an empty result (ok=false), never an error to the guest.
// The returned strings are copies, so buf may be guest memory: one copy of
// the whole buffer that they share, not one allocation per name and value.
func DecodePairs(buf []byte) (pairs [][2]string, ok bool) {
	if len(buf) > maxPairsBytes || len(buf) < 4 {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint32(buf))
	if n > maxPairsCount {
		return nil, false
	}
	pos := 4 + n*8 // the sizes come first, two per pair; the data after them
	if pos > len(buf) {
		return nil, false
	}
	all := string(buf)
	pairs = make([][2]string, n)
	for i := range pairs {
		for j := range 2 {
			l := int(binary.LittleEndian.Uint32(buf[4+i*8+j*4:]))
			if l < 0 || pos+l+1 > len(buf) || pos+l+1 < pos {
				return nil, false
			}
			pairs[i][j] = all[pos : pos+l]
			pos += l
			if buf[pos] != 0 {
				return nil, false
			}
			pos++
		}
	}
	if pos != len(buf) {
		return nil, false
	}
	return pairs, true
}
