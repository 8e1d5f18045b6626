package wasmhost

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
)

// A Go module writes its initial memory as tens of thousands of small data segments (the
// linker starts a new one after every run of zeros: the filter has about 47,000 for 1.6 MB).
// wazero evaluates each segment's offset expression on every instantiation, with an
// allocation each: most of a VM's start-up. mergeDataSegments writes the same initial memory
// in a few segments, which the host compiles instead: every byte of code and data is the
// module's own, and a new VM's memory is identical byte for byte.

// maxSegmentGap is the longest run of memory between two segments that a merged segment
// covers with zeros (what fresh memory holds there anyway).
const maxSegmentGap = 1024

// Section ids of the binary format.
const (
	sectionMemory    = 5
	sectionData      = 11
	sectionDataCount = 12
)

var errUnmergeable = errors.New("data segments not mergeable")

// mergeDataSegments returns wasm with runs of its data segments merged, or wasm itself when
// the module is not of the shape where merging changes nothing but the segments' number: it
// defines its memory (so it starts zeroed; an imported one may hold data), it has no data
// count section (without one, no instruction names a segment), and every segment is active
// at an i32.const offset, in ascending order without overlaps. Malformed input is returned
// as it is, for the compiler to refuse.
func mergeDataSegments(wasm []byte) []byte {
	out, err := mergeData(wasm)
	if err != nil {
		return wasm
	}
	return out
}

func mergeData(wasm []byte) ([]byte, error) {
	if len(wasm) < 8 {
		return nil, errUnmergeable
	}
	var (
		out        = append(make([]byte, 0, len(wasm)), wasm[:8]...)
		p          = 8
		definesMem = false
		merged     = false
	)
	for p < len(wasm) {
		id := wasm[p]
		size, n := binary.Uvarint(wasm[p+1:])
		start := p + 1 + n
		if n <= 0 || size > uint64(len(wasm)-start) {
			return nil, errUnmergeable
		}
		end := start + int(size)
		switch id {
		case sectionMemory:
			count, n := binary.Uvarint(wasm[start:end])
			definesMem = n > 0 && count == 1
		case sectionDataCount:
			return nil, errUnmergeable
		case sectionData:
			if !definesMem || merged {
				return nil, errUnmergeable
			}
			body, err := mergedDataSection(wasm[start:end])
			if err != nil {
				return nil, err
			}
			out = append(out, sectionData)
			out = binary.AppendUvarint(out, uint64(len(body)))
			out = append(out, body...)
			merged = true
			p = end
			continue
		}
		out = append(out, wasm[p:end]...)
		p = end
	}
	if !merged {
		return nil, errUnmergeable
	}
	return out, nil
}

// mergedDataSection returns the contents of a data section that writes what sec (the
// section's contents) does, with each run of segments at most maxSegmentGap apart written as
// one. Segments may come in any order (Go's linker writes its data sections in turn); ranges
// that overlap are refused, since there the order decides what memory holds.
func mergedDataSection(sec []byte) ([]byte, error) {
	count, n := binary.Uvarint(sec)
	if n <= 0 || count > uint64(len(sec)) {
		return nil, errUnmergeable
	}
	q := n
	type segment struct {
		offset int64
		data   []byte
	}
	segs := make([]segment, 0, count)
	for range count {
		// flags 0 (active, memory 0), then the offset expression: i32.const n, end.
		if len(sec)-q < 2 || sec[q] != 0 || sec[q+1] != 0x41 {
			return nil, errUnmergeable
		}
		q += 2
		offset, n := readSLEB32(sec[q:])
		if n <= 0 || offset < 0 || q+n >= len(sec) || sec[q+n] != 0x0b {
			return nil, errUnmergeable
		}
		q += n + 1
		size, n := binary.Uvarint(sec[q:])
		if n <= 0 || size > uint64(len(sec)-q-n) {
			return nil, errUnmergeable
		}
		q += n
		segs = append(segs, segment{offset, sec[q : q+int(size)]})
		q += int(size)
	}
	if q != len(sec) {
		return nil, errUnmergeable
	}
	slices.SortStableFunc(segs, func(a, b segment) int { return cmp.Compare(a.offset, b.offset) })
	var out []byte // the segments; the count, known once they are written, goes in front
	written := 0
	for i := 0; i < len(segs); {
		// segs[i:j] is a run: each starts at most maxSegmentGap after the previous one's end.
		j, end := i+1, segs[i].offset+int64(len(segs[i].data))
		for ; j < len(segs); j++ {
			if segs[j].offset < end {
				return nil, errUnmergeable
			}
			if segs[j].offset-end > maxSegmentGap {
				break
			}
			end = segs[j].offset + int64(len(segs[j].data))
		}
		out = append(out, 0, 0x41)
		out = appendSLEB(out, segs[i].offset)
		out = append(out, 0x0b)
		out = binary.AppendUvarint(out, uint64(end-segs[i].offset))
		at := len(out)
		out = append(out, make([]byte, end-segs[i].offset)...)
		for _, s := range segs[i:j] {
			copy(out[at+int(s.offset-segs[i].offset):], s.data)
		}
		written++
		i = j
	}
	return append(binary.AppendUvarint(nil, uint64(written)), out...), nil
}

// readSLEB32 decodes a signed LEB128 of at most 5 bytes (an i32) and returns it with the
// number of bytes read, or n <= 0 when b does not start with one.
func readSLEB32(b []byte) (v int64, n int) {
	var shift uint
	for i := 0; i < len(b) && i < 5; i++ {
		c := b[i]
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if c&0x40 != 0 {
				v |= -1 << shift
			}
			return int64(int32(v)), i + 1
		}
	}
	return 0, 0
}

// appendSLEB appends v as a signed LEB128.
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
