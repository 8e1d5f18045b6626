package moduletest

import (
	"flag"
	"os"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
)

// TestMain runs four parallel tests at a time unless -test.parallel says otherwise (the
// default is the number of CPUs, two on the development machine). A few parallel tests spend
// seconds sleeping on Redis' real clock or waiting for the VM's retry tick
// (TestOverLimitCacheKeepsNoOverflowDenialWasm 14 s, TestUsageGlobalDeadRedisWasm 4 s): with
// two slots they held one each and the other tests ran one at a time behind them. Four slots
// keep both cores busy while they wait.
func TestMain(m *testing.M) {
	flag.Parse()
	redistest.DefaultParallel(4)
	os.Exit(m.Run())
}
