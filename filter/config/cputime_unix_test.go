//go:build unix

package config

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cpuTime returns the CPU time (user and system) the test process has used. The package's
// tests run one at a time, so a difference of two readings is what the code between them
// cost, whatever else runs on a shared machine, where wall time can stretch several-fold.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
