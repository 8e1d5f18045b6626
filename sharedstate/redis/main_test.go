package redis_test

import (
	"flag"
	"os"
	"runtime"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
)

// TestMain runs the tests on one P (GOMAXPROCS 1) unless -test.cpu says otherwise, and eight
// parallel tests at a time unless -test.parallel says otherwise. Nearly all of this package's
// test time is HTTP round trips through webdis to redis-server, each a ping-pong between three
// processes; with two Ps, the Go scheduler hands every wake-up between threads, which cost a
// quarter more CPU per round trip in total (BenchmarkRoundTrip, 10000 round trips, side by
// side). With eight round trips in flight rather than two (the default, the number of CPUs),
// webdis and redis-server serve several per wake-up: the package's tests take a sixth less CPU
// in all, a third less system time (measured side by side, twice).
func TestMain(m *testing.M) {
	flag.Parse()
	redistest.DefaultParallel(8)
	runtime.GOMAXPROCS(1)
	os.Exit(m.Run())
}
