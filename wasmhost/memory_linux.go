package wasmhost

import (
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// mappedMemory is a linear memory in an anonymous private mapping of its maximum size, which
// the kernel fills with zero pages as they are first touched. It is unmapped when wazero
// closes the VM's module: the Host closes a VM's module only once no call runs in it (see
// Close).
type mappedMemory struct{ buf []byte }

// reserveMemory maps max bytes (MAP_NORESERVE: the mapping commits no memory until touched),
// or returns nil.
func reserveMemory(max uint64) experimental.LinearMemory {
	if max == 0 || max > 1<<32 {
		return nil
	}
	buf, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	// Transparent huge pages where the kernel allows them for advised mappings: a VM's start
	// touches megabytes (the module's data, then the Go runtime's heap), and 2 MiB pages take
	// a few faults for that where 4 KiB pages take thousands (BenchmarkInstantiateInitialize:
	// 2.7 to 3.8x faster per VM on this project's 2-core test machine). Refused, it changes
	// nothing.
	_ = syscall.Madvise(buf, syscall.MADV_HUGEPAGE)
	return &mappedMemory{buf: buf[:0]}
}

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.buf)) {
		return nil // beyond the maximum: the guest's memory.grow fails
	}
	return m.buf[:size]
}

func (m *mappedMemory) Free() {
	if m.buf != nil {
		_ = syscall.Munmap(m.buf[:cap(m.buf)])
		m.buf = nil
	}
}
