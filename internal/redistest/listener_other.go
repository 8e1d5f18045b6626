//go:build !linux

package redistest

// listensOn cannot tell who holds a port where there is no /proc: it reports true.
func listensOn(pid, port int) (bool, error) { return true, nil }
