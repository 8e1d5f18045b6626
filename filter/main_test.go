package filter

import (
	"os"
	"runtime"
	"testing"
)

// TestMain runs the tests on one P (GOMAXPROCS 1) unless -test.cpu says otherwise. Most of
// this package's test CPU is the native fleet's HTTP round trips to webdis and redis-server,
// and few of its tests run in parallel; with two Ps the Go scheduler hands each wake-up
// between threads. One P takes a sixth less CPU for the package (measured side by side, four
// runs each: 17.2, 16.1, 17.8 and 19.1 CPU-s with two Ps, 15.2, 12.4, 14.6 and 15.2 with one).
func TestMain(m *testing.M) {
	runtime.GOMAXPROCS(1)
	os.Exit(m.Run())
}
