package wasmhost

import "github.com/tetratelabs/wazero/experimental"

// memoryAllocator backs each VM's linear memory. Where the system can, it reserves the
// memory's maximum (1 GiB, see runtimeFor) of address space up front, as V8 does, so that
// growing the memory never moves it: wazero's default appends to a Go slice, which copies the
// whole memory every quarter of growth, and a Go guest grows its memory 64 KiB at a time (a
// VM configuring a key table of hundreds of MiB copied gigabytes). Pages the guest never
// touches take no memory. Elsewhere, or when the reservation fails, the memory is a Go slice
// grown like wazero's.
var memoryAllocator = experimental.MemoryAllocatorFunc(func(capacity, max uint64) experimental.LinearMemory {
	if m := reserveMemory(max); m != nil {
		return m
	}
	return &sliceMemory{buf: make([]byte, 0, capacity)}
})

// sliceMemory is a linear memory in a Go slice.
type sliceMemory struct{ buf []byte }

func (m *sliceMemory) Reallocate(size uint64) []byte {
	if n := uint64(len(m.buf)); size > n {
		m.buf = append(m.buf, make([]byte, size-n)...)
	}
	return m.buf[:size]
}

func (m *sliceMemory) Free() { m.buf = nil }
