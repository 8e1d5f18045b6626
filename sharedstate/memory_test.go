package sharedstate

import "github.com/ratelimit-wasm/ratelimit/sharedstate/memstore"

// Memory and NewMemory name the in-process store for this package's tests, internal and
// external.
type Memory = memstore.Memory

func NewMemory() *Memory { return memstore.New() }
