//go:build !unix

package config

import (
	"testing"
	"time"
)

// cpuTime falls back to the wall clock where the process's CPU time cannot be read.
func cpuTime(*testing.T) time.Duration { return time.Duration(time.Now().UnixNano()) }
