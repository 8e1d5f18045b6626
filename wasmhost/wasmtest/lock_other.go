//go:build !unix

package wasmtest

// lockFile is a no-op where flock is unavailable: builds write to a temporary
// file and rename it, so concurrent builders only duplicate work.
func lockFile(string) (func(), error) { return func() {}, nil }
