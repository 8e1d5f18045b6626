//go:build wasip1

package abi

import "unsafe"

// pinned holds every buffer the host allocated through proxy_on_memory_allocate and the guest
// has not yet taken. The host only learns a raw 32-bit address; that address does not keep the
// Go object alive, so without this slice a garbage collection between the host's write and the
// guest's read could hand the same memory to another object and corrupt the data (an observed
// failure, not a hypothetical one). The guest is single-threaded and the host allocates only
// while the guest is inside a host call, so the slice is short: usually one entry.
var pinned [][]byte

// chunk is a block that small host buffers are carved from, chunk[:used] being handed out
// already. A request reads a few short values (a property, a header or two, a shared-data slot
// per rule), and allocating each on its own costs a trip through the Go allocator, which is
// slow in a Wasm VM. Carving them from one block costs a slice operation. Every buffer is a
// distinct region of the block, never handed out twice, and capped so that an append cannot
// spill into its neighbour, so callers own what they get exactly as with make. A block lives
// while any of its buffers does; buffers are short-lived (decoded, parsed or used for one
// request), and larger ones get their own allocation, so little memory is held for long.
var (
	chunk []byte
	used  int
)

const (
	chunkSize  = 4096
	maxChunked = 256 // larger buffers are allocated on their own
)

// bodyBuf is the memory response body chunks are read into (see GetHttpResponseBody), the same
// from chunk to chunk: a stream's body arrives in many chunks, and memory of its own for each
// would cost an allocation of its size and, every few megabytes, a garbage collection (together
// three times the rest of the read, measured by BenchmarkGuestPerChunk). intoBody is set while
// the host call that reads a chunk is in progress.
var (
	bodyBuf  []byte
	intoBody bool
)

// proxyOnMemoryAllocate is the allocator the host calls to return data. It runs on every
// header, property and shared-data read, so its common path is kept to a few operations: no
// defer (carving from a block cannot panic) and no pointer written but the pin.
//
//go:wasmexport proxy_on_memory_allocate
func proxyOnMemoryAllocate(size uint32) (addr uint32) {
	n := int(size)
	if n == 0 {
		// A zero-length slice has no stable address to hand out.
		n = 1
	}
	if intoBody && n <= MaxBodyRead {
		return bodyMemory(n)
	}
	if n > maxChunked {
		return allocateLarge(n)
	}
	if used+n > len(chunk) {
		chunk, used = make([]byte, chunkSize), 0
	}
	b := chunk[used : used+n : used+n]
	used += n
	pinned = append(pinned, b)
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

// allocateLarge gives a buffer of its own to an allocation too large to carve from a block.
func allocateLarge(n int) (addr uint32) {
	defer func() {
		// An allocation failure (a size the runtime refuses) cannot be reported to the host
		// in any other way: returning 0 makes the host fail the call cleanly instead of
		// trapping the whole VM.
		if r := recover(); r != nil {
			addr = 0
		}
	}()
	b := make([]byte, n)
	pinned = append(pinned, b)
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

// bodyMemory hands out the first n bytes of bodyBuf, allocated on first use.
func bodyMemory(n int) (addr uint32) {
	if bodyBuf == nil {
		bodyBuf = make([]byte, MaxBodyRead)
	}
	b := bodyBuf[:n:n]
	pinned = append(pinned, b)
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

// take returns the host-written buffer at addr as a Go slice of length size and unpins every
// buffer: once the caller holds the slice, its reference keeps the memory alive. A buffer the
// allocator did not hand out (which a correct host never returns) is copied instead, so the
// result never aliases memory the Go runtime does not own.
//
// It is kept out of line (see filter/doc.go): inlined, it would be a copy in every host read,
// which a VM's first request would compile again in each read it makes for the first time
// (the configuration read compiles it once).
func take(addr, size uint32) []byte {
	if size == 0 || addr == 0 {
		unpinAll()
		return nil
	}
	for i := len(pinned) - 1; i >= 0; i-- {
		b := pinned[i]
		if uint32(uintptr(unsafe.Pointer(&b[0]))) == addr && uint32(len(b)) >= size {
			unpinAll()
			return b[:size:size]
		}
	}
	unpinAll()
	out := make([]byte, size)
	copy(out, unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(addr))), size))
	return out
}

// read completes a host read that returned status st and wrote its buffer's address and size
// into retAddr and retSize: the buffer on success, readFailed's error otherwise. Every read
// goes through it, one function out of line rather than the same check and two calls in each
// read (see filter/doc.go): the configuration read has compiled this one before any request
// reads a header or a property.
func read(st uint32) ([]byte, error) {
	if st != statusOK {
		return nil, readFailed(st)
	}
	return take(retAddr, retSize), nil
}

// readFailed unpins every buffer after a host read that failed with status st, and returns
// st's error. It is one function for every read, out of line, so that no read carries this
// path's code (see take).
func readFailed(st uint32) error {
	unpinAll()
	return statusError(st)
}

// unpinAll drops the references to every pinned buffer, also after a failed host call that may
// have allocated before failing. The entries are cleared one by one, last first: there is
// usually one, and the compiler turns a forward loop that stores nil into a call of
// runtime.memclrHasPointers (the collector's bulk write barrier over the whole range), which
// cost about 0.3 us per host read in a Wasm VM, three times per request.
func unpinAll() {
	for i := len(pinned) - 1; i >= 0; i-- {
		pinned[i] = nil
	}
	pinned = pinned[:0]
}
