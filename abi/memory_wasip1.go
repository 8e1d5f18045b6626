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

// chunk is a block of chunkSize bytes that host buffers of up to maxChunked bytes are carved
// from, chunk[:used] being handed out already: a request reads a few short values, and the Go
// allocator is slow in a Wasm VM. Every buffer is a distinct region of the block, capped so
// that an append cannot spill into its neighbour, so callers own what they get exactly as with
// make. A block lives while any of its short-lived buffers does.
var (
	chunk []byte
	used  int
)

const chunkSize, maxChunked = 4096, 256

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
// goes through this one function, which the configuration read compiles before any request
// reads a header or a property, rather than the same check and calls in each (see
// filter/doc.go); take and readFailed are out of line for the same reason.
func read(st uint32) ([]byte, error) {
	if st != statusOK {
		return nil, readFailed(st)
	}
	return take(retAddr, retSize), nil
}

// readFailed unpins every buffer after a host read that failed with status st, and returns
// st's error.
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
