package wasmhost

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// dataSegmentCount returns the number of segments of wasm's data section.
func dataSegmentCount(t *testing.T, wasm []byte) uint64 {
	t.Helper()
	for p := 8; p < len(wasm); {
		size, n := binary.Uvarint(wasm[p+1:])
		start := p + 1 + n
		if wasm[p] == sectionData {
			count, _ := binary.Uvarint(wasm[start:])
			return count
		}
		p = start + int(size)
	}
	t.Fatal("no data section")
	return 0
}

// The filter's module merged: a few segments for its tens of thousands, and the memory of a
// VM instantiated from it is the original's, byte for byte.
func TestMergeDataSegmentsKeepsTheMemory(t *testing.T) {
	wasm := wasmtest.BuildModule(t)
	merged := mergeDataSegments(wasm)
	before, after := dataSegmentCount(t, wasm), dataSegmentCount(t, merged)
	t.Logf("%d data segments merged into %d; module %d -> %d bytes", before, after, len(wasm), len(merged))
	require.Greater(t, before, uint64(10000))
	require.Less(t, after, uint64(100))

	// The interpreter compiles in a fraction of the compiler's time; the memory image is the
	// store's work, the same under both.
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	require.NoError(t, instantiateHostModules(ctx, rt))
	memory := func(wasm []byte) []byte {
		cm, err := rt.CompileModule(ctx, wasm)
		require.NoError(t, err)
		mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
		require.NoError(t, err)
		defer mod.Close(ctx)
		b, ok := mod.Memory().Read(0, mod.Memory().Size())
		require.True(t, ok)
		return bytes.Clone(b)
	}
	want, got := memory(wasm), memory(merged)
	require.Equal(t, len(want), len(got))
	require.True(t, bytes.Equal(want, got), "the merged module's initial memory differs")
}

// dataModule is a module with a memory (unless imported), the given data section contents
// and, when dataCount, a data count section.
func dataModule(ownMemory, dataCount bool, segments ...[]byte) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00")
	if ownMemory {
		m = append(m, section(sectionMemory, []byte{1, 0, 1})...) // one memory, min 1 page
	} else {
		m = append(m, section(2, cat(uleb(1), wstr("env"), wstr("memory"), []byte{2, 0, 1}))...)
	}
	if dataCount {
		m = append(m, section(sectionDataCount, uleb(uint64(len(segments))))...)
	}
	return append(m, section(sectionData, wvec(segments))...)
}

// activeSegment is an active segment of memory 0 at offset.
func activeSegment(offset int32, data string) []byte {
	return cat([]byte{0}, iConst(offset), []byte{0x0b}, wstr(data))
}

// Segments at most maxSegmentGap apart are merged with zeros between them; farther ones stay
// apart. Modules of any other shape come back unchanged, and so does every truncation.
func TestMergeDataSegmentsOnlyWhereNothingElseChanges(t *testing.T) {
	const far = 8 + maxSegmentGap // more than maxSegmentGap after "cde" ends at 7
	in := dataModule(true, false, activeSegment(far, "f"), activeSegment(0, "ab"), activeSegment(4, "cd"),
		activeSegment(far+1+maxSegmentGap, "g"), activeSegment(6, "e"))
	want := dataModule(true, false, activeSegment(0, "ab\x00\x00cde"),
		activeSegment(far, "f"+strings.Repeat("\x00", maxSegmentGap)+"g"))
	require.Equal(t, want, mergeDataSegments(in))

	for name, m := range map[string][]byte{
		"imported memory":    dataModule(false, false, activeSegment(0, "a"), activeSegment(2, "b")),
		"data count":         dataModule(true, true, activeSegment(0, "a"), activeSegment(2, "b")),
		"passive segment":    dataModule(true, false, activeSegment(0, "a"), cat([]byte{1}, wstr("b"))),
		"global offset":      dataModule(true, false, activeSegment(0, "a"), cat([]byte{0, 0x23, 0, 0x0b}, wstr("b"))),
		"overlap":            dataModule(true, false, activeSegment(0, "abc"), activeSegment(2, "d")),
		"overlap, reordered": dataModule(true, false, activeSegment(8, "a"), activeSegment(0, "bbbbbbbbbb")),
		"offset above 2^31":  dataModule(true, false, activeSegment(0, "a"), activeSegment(-8, "b")),
		"no data":            []byte("\x00asm\x01\x00\x00\x00"),
	} {
		require.Equal(t, m, mergeDataSegments(m), name)
	}
	for n := range in {
		require.Equal(t, in[:n], mergeDataSegments(in[:n]), "truncated to %d bytes", n)
	}
	trailing := append(bytes.Clone(in[:len(in)-1]), 0x0b)
	trailing = append(trailing, 0)
	require.Equal(t, trailing, mergeDataSegments(trailing), "a section longer than its segments")
}
