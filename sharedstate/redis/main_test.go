package redis_test

import (
	"os"
	"runtime"
	"testing"
)

// TestMain runs the tests on one P (GOMAXPROCS 1) unless -test.cpu says otherwise. Nearly all
// of this package's test time is HTTP round trips through webdis to redis-server, each a
// ping-pong between three processes; with two Ps, the Go scheduler hands every wake-up between
// threads, which cost a quarter more CPU per round trip in total (BenchmarkRoundTrip, 10000
// round trips, side by side). The parallel tests still overlap their round trips: -parallel
// keeps its default, the number of CPUs.
func TestMain(m *testing.M) {
	runtime.GOMAXPROCS(1)
	os.Exit(m.Run())
}
