package abi

import (
	"strings"
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

// joinedByDecoding is HeaderMap.Joined's specification: the lines decodeHeaders finds, joined
// by ",".
func joinedByDecoding(buf []byte, key string) (string, bool) {
	var vals []string
	for _, kv := range decodeHeaders(buf) {
		if kv[0] == key {
			vals = append(vals, kv[1])
		}
	}
	return strings.Join(vals, ","), len(vals) > 0
}

func TestHeaderMapJoined(t *testing.T) {
	m := HeaderMap{encodeHeaders([][2]string{{":path", "/"}, {"x-forwarded-for", "1.1.1.1, 2.2.2.2"},
		{"x-one", "v"}, {"x-forwarded-for", ""}, {"x-forwarded-for", "3.3.3.3"}})}
	for _, key := range []string{"x-forwarded-for", "x-one", ":path", "x-missing"} {
		got, ok := m.Joined(key)
		want, wantOK := joinedByDecoding(m.buf, key)
		require.Equal(t, want, got, key)
		require.Equal(t, wantOK, ok, key)
	}
	got, _ := m.Joined("x-forwarded-for")
	require.Equal(t, "1.1.1.1, 2.2.2.2,,3.3.3.3", got)
	first, last, n := m.Lines("x-forwarded-for")
	require.Equal(t, [3]any{"1.1.1.1, 2.2.2.2", "3.3.3.3", 3}, [3]any{first, last, n})
}

// Joined and Lines never panic on a malformed map and agree with decoding it.
func FuzzHeaderMapJoined(f *testing.F) {
	f.Add(encodeHeaders([][2]string{{"k", "a"}, {"k", "b"}, {"j", "c"}}), "k")
	f.Add([]byte{2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'k', 0, 'a', 0}, "k")
	f.Fuzz(func(t *testing.T, buf []byte, key string) {
		m := HeaderMap{buf}
		got, ok := m.Joined(key)
		want, wantOK := joinedByDecoding(buf, key)
		if got != want || ok != wantOK {
			t.Fatalf("Joined(%q) = %q, %v; decoding gives %q, %v", key, got, ok, want, wantOK)
		}
		first, last, n := m.Lines(key)
		f2, l2, n2 := linesByDecoding(buf, key)
		if first != f2 || last != l2 || n != n2 {
			t.Fatalf("Lines(%q) = %q %q %d; decoding gives %q %q %d", key, first, last, n, f2, l2, n2)
		}
	})
}
