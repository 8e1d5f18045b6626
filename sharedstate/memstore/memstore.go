// Package memstore is an in-process sharedstate.Store for tests and benchmarks that run outside
// a proxy-wasm host. It returns the ABI's errors, which are sharedstate's, so that it needs
// not import sharedstate and sharedstate's own tests can use it.
package memstore

import (
	"strings"
	"sync"

	"github.com/ratelimit-wasm/ratelimit/abi"
)

// Memory is an in-process Store that follows Envoy's rules exactly, for tests and benchmarks
// that run outside a proxy-wasm host. It is safe for concurrent use.
type Memory struct {
	mu      sync.Mutex
	entries map[string]*memoryEntry
	nextCas uint32
}

type memoryEntry struct {
	value []byte
	cas   uint32
}

// New returns an empty Memory store.
func New() *Memory { return &Memory{entries: map[string]*memoryEntry{}, nextCas: 1} }

// Get returns a copy of the value stored at key and its CAS number.
func (m *Memory) Get(key string) ([]byte, uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok {
		return nil, 0, abi.ErrNotFound
	}
	return append([]byte(nil), e.value...), e.cas, nil
}

// Set stores a copy of value at key under Envoy's CAS rules. A new key is stored as a copy of
// its own: the caller may reuse the key's bytes.
func (m *Memory) Set(key string, value []byte, cas uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if ok && cas != 0 && cas != e.cas {
		return abi.ErrCasMismatch
	}
	if !ok {
		e = &memoryEntry{}
		m.entries[strings.Clone(key)] = e
	}
	e.value, e.cas = append([]byte(nil), value...), m.next()
	return nil
}

// Len returns the number of keys stored.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// next returns the next CAS number, skipping 0 on wrap-around like Envoy does.
func (m *Memory) next() uint32 {
	c := m.nextCas
	m.nextCas++
	if m.nextCas == 0 {
		m.nextCas = 1
	}
	return c
}

// Keys returns the stored keys, for tests that check what was written.
func (m *Memory) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]string, 0, len(m.entries))
	for k := range m.entries {
		keys = append(keys, k)
	}
	return keys
}
