package moduletest

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cpuTime returns the CPU time (user and system) the test process has used. The tests that
// read it run before the package's parallel tests start, so a difference of two readings is
// what the code between them cost, however busy the machine: there wall time stretches
// several-fold, and a bound on it fails for reasons that are not the code's.
func cpuTime(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
