package abi

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// decodeHeaders parses the proxy-wasm map encoding, the specification encodeHeaders and
// scanHeaderLines are checked against. It never trusts the lengths it reads: a malformed
// buffer yields the pairs decoded so far rather than a panic.
func decodeHeaders(buf []byte) [][2]string {
	if len(buf) < 4 {
		return nil
	}
	n := binary.LittleEndian.Uint32(buf)
	if uint64(n)*8 > uint64(len(buf)-4) {
		return nil
	}
	lens := buf[4 : 4+8*int(n)]
	data := buf[4+8*int(n):]
	pairs := make([][2]string, 0, n)
	for i := 0; i < int(n); i++ {
		kl := uint64(binary.LittleEndian.Uint32(lens[8*i:]))
		vl := uint64(binary.LittleEndian.Uint32(lens[8*i+4:]))
		if kl+1+vl+1 > uint64(len(data)) {
			return pairs
		}
		k := string(data[:kl])
		data = data[kl+1:]
		v := string(data[:vl])
		data = data[vl+1:]
		pairs = append(pairs, [2]string{k, v})
	}
	return pairs
}

func TestHeadersRoundTrip(t *testing.T) {
	for _, pairs := range [][][2]string{
		{},
		{{":method", "GET"}},
		{{":path", "/a?b=c"}, {"x-empty", ""}, {"", "v"}, {"k", "ü\x00\xff"}},
	} {
		got := decodeHeaders(encodeHeaders(pairs))
		require.Equal(t, len(pairs), len(got))
		for i := range pairs {
			require.Equal(t, pairs[i], got[i])
		}
	}
}

func TestEmptyMapIsFourBytes(t *testing.T) {
	// Hosts treat a zero-length map buffer differently from an empty map; see encodeHeaders.
	require.Equal(t, []byte{0, 0, 0, 0}, encodeHeaders(nil))
}

func TestDecodeHeadersNeverTrustsLengths(t *testing.T) {
	buf := make([]byte, 12)
	binary.LittleEndian.PutUint32(buf, 1)
	binary.LittleEndian.PutUint32(buf[4:], 1<<31)
	require.Empty(t, decodeHeaders(buf))
	binary.LittleEndian.PutUint32(buf, 1<<30)
	require.Nil(t, decodeHeaders(buf))
	require.Nil(t, decodeHeaders([]byte{1}))
}

func FuzzDecodeHeaders(f *testing.F) {
	f.Add(encodeHeaders([][2]string{{"a", "b"}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		pairs := decodeHeaders(b)
		if len(pairs) > 0 {
			// Whatever decodes must encode back to a prefix-consistent buffer.
			again := decodeHeaders(encodeHeaders(pairs))
			require.Equal(t, pairs, again)
		}
	})
}

func TestEncodePath(t *testing.T) {
	require.Equal(t, "xds\x00route_name", string(appendPath(nil, []string{"xds", "route_name"})))
	require.Empty(t, appendPath(nil, nil))
}
