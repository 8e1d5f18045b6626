package moduletest

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs four parallel tests at a time unless -test.parallel says otherwise (the
// default is the number of CPUs, two on the development machine). A few parallel tests spend
// seconds sleeping on Redis' real clock or waiting for the VM's retry tick
// (TestOverLimitCacheKeepsNoOverflowDenialWasm 14 s, TestUsageGlobalDeadRedisWasm 4 s): with
// two slots they held one each and the other tests ran one at a time behind them. Four slots
// keep both cores busy while they wait.
func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", "4")
	}
	os.Exit(m.Run())
}
