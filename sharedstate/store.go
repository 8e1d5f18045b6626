// Package sharedstate keeps rate-limit state where every worker of a proxy can see it: in
// Envoy's shared data, a process-wide key-value store with compare-and-swap, and (in the
// global scope) in Redis.
//
// Envoy's shared data never deletes a key and has no expiry, while the keys a rate limiter
// needs are chosen by clients (one per IP, per API key, ...). Table therefore maps keys onto a
// fixed number of slots per rule; see Table for how keys are placed, reclaimed and what
// happens when the table is full.
package sharedstate

import (
	"errors"

	"github.com/ratelimit-wasm/ratelimit/abi"
)

// Errors a Store returns: the key has never been written; it was written by someone else
// since it was read. They are the ABI's values, so the host store needs no translation.
var (
	ErrNotFound    = abi.ErrNotFound
	ErrCasMismatch = abi.ErrCasMismatch
)

// Store is a key-value store with Envoy's shared-data semantics:
//   - Get of a missing key returns ErrNotFound; otherwise the value and its CAS number.
//   - Set with cas 0 writes unconditionally. Set of a key that does not exist succeeds whatever
//     the cas. Otherwise a cas different from the stored one fails with ErrCasMismatch.
//   - CAS numbers come from one counter shared by all keys and are never 0.
//
// The value Get returns belongs to the caller. Neither method may keep the key string, nor Set
// the value, after it returns (the host copies them): Table builds names and values in buffers
// it reuses.
type Store interface {
	Get(key string) (value []byte, cas uint32, err error)
	Set(key string, value []byte, cas uint32) error
}

// Host is the Store of the proxy-wasm host: Envoy's shared data for the VM id of this plugin.
type Host struct{}

// Get reads key from the host's shared data.
func (Host) Get(key string) ([]byte, uint32, error) { return abi.GetSharedData(key) }

// Set writes key to the host's shared data.
func (Host) Set(key string, value []byte, cas uint32) error {
	return abi.SetSharedData(key, value, cas)
}

// isNotFound reports whether err is the store's "no such key". The host's answer is
// ErrNotFound itself, compared first, so that a VM's first read of a key does not compile
// errors.Is (see filter/doc.go); not inlined, which is less code to compile at its callers.
//
//go:noinline
func isNotFound(err error) bool {
	return err == ErrNotFound || err != nil && errors.Is(err, ErrNotFound)
}
