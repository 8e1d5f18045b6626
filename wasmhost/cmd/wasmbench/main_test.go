package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// The runner builds a product package's tests for wasip1 and runs its benchmarks under wazero:
// the output names the Wasm target and the benchmark, and a failing binary's exit code comes
// back (here: an unknown flag, which the testing package refuses with exit code 2).
func TestRunsAPackagesBenchmarksInWasm(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a test binary for wasip1")
	}
	ctx := context.Background()
	var out bytes.Buffer
	wasm, wd, err := buildTests(filepath.Join(wasmtest.ModuleRoot(), "algorithms"), &out)
	require.NoError(t, err, out.String())
	code, err := Run(ctx, wasm, wd, []string{"-test.run", "^$", "-test.bench", "AllowN/token", "-test.benchtime", "100x"}, &out)
	require.NoError(t, err)
	require.Zero(t, code, out.String())
	require.Contains(t, out.String(), "goos: wasip1")
	require.Regexp(t, `BenchmarkAllowN/token\S*\s+100\s+\d`, out.String())

	out.Reset()
	code, err = Run(ctx, wasm, wd, []string{"-test.nosuchflag"}, &out)
	require.NoError(t, err)
	require.Equal(t, 2, code, out.String())
}
