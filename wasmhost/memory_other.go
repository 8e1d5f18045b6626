//go:build !linux

package wasmhost

import "github.com/tetratelabs/wazero/experimental"

// reserveMemory reserves nothing here: memories are Go slices (see memoryAllocator).
func reserveMemory(uint64) experimental.LinearMemory { return nil }
