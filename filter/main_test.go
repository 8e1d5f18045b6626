package filter

import (
	"bytes"
	"io"
	"log"
	"os"
	"runtime"
	"testing"
)

// TestMain runs the tests on one P (GOMAXPROCS 1) unless -test.cpu says otherwise. Most of
// this package's test CPU is the native fleet's HTTP round trips to webdis and redis-server,
// and few of its tests run in parallel; with two Ps the Go scheduler hands each wake-up
// between threads. One P takes a sixth less CPU for the package (measured side by side, four
// runs each: 17.2, 16.1, 17.8 and 19.1 CPU-s with two Ps, 15.2, 12.4, 14.6 and 15.2 with one).
//
// It also keeps the SDK host emulator's four lines on every HTTP callout (its timeout,
// headers, body and trailers, printed with the standard logger) out of the output: the
// package's callouts made about 100,000 lines, written to a pipe that go test reads, a
// seventh of the test process's CPU. The emulator's other lines, the guest's logs among
// them, are written as before.
func TestMain(m *testing.M) {
	runtime.GOMAXPROCS(1)
	log.SetOutput(withoutCalloutDumps{os.Stderr})
	os.Exit(m.Run())
}

// withoutCalloutDumps writes to w every log line but the emulator's callout dumps.
type withoutCalloutDumps struct{ w io.Writer }

func (d withoutCalloutDumps) Write(line []byte) (int, error) {
	if bytes.Contains(line, []byte(" [http callout to ")) {
		return len(line), nil
	}
	return d.w.Write(line)
}
