package abi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// linesByDecoding is scanHeaderLines' specification: the lines decodeHeaders finds.
func linesByDecoding(buf []byte, key string) (first, last string, n int) {
	for _, kv := range decodeHeaders(buf) {
		if kv[0] == key {
			if n == 0 {
				first = kv[1]
			}
			last = kv[1]
			n++
		}
	}
	return first, last, n
}

func TestScanHeaderLines(t *testing.T) {
	buf := encodeHeaders([][2]string{{":path", "/"}, {"x-api-key", "rnd"}, {"x-other", "o"},
		{"x-api-key", ""}, {"x-api-key", "real"}})
	first, last, n := scanHeaderLines(buf, "x-api-key")
	require.Equal(t, "rnd", first)
	require.Equal(t, "real", last)
	require.Equal(t, 3, n)
	_, _, n = scanHeaderLines(buf, "x-missing")
	require.Zero(t, n)
	_, _, n = scanHeaderLines(nil, "x-api-key")
	require.Zero(t, n)
	require.Zero(t, testing.AllocsPerRun(100, func() { scanHeaderLines(buf, "x-api-key") }))
}

// Whatever the bytes, scanning never panics and agrees with decoding.
func FuzzScanHeaderLines(f *testing.F) {
	f.Add(encodeHeaders([][2]string{{"k", "a"}, {"k", "b"}}), "k")
	f.Add([]byte{2, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 'k', 0}, "k")
	f.Add([]byte{}, "")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		f1, l1, n1 := scanHeaderLines(b, key)
		f2, l2, n2 := linesByDecoding(b, key)
		require.Equal(t, [3]any{f2, l2, n2}, [3]any{f1, l1, n1})
	})
}
