// Command wasmbench runs a product package's tests and benchmarks compiled to Wasm (GOOS=wasip1
// GOARCH=wasm) under wazero, the runtime of the emulator, so that the pieces of the request
// path can be measured as the filter runs them rather than natively. The package's proxy-wasm
// imports (the abi package's host calls) are stubbed: each returns 0 (Ok) and writes nothing,
// so a benchmark that makes host calls measures the guest's side of them only; benchmarks of
// pure code (sharedstate with a memory store, algorithms, filter/config) are unaffected.
//
// Usage, from the repository root:
//
//	go run ./wasmhost/cmd/wasmbench ./sharedstate -test.run '^$' -test.bench TableAllowN -test.benchmem
//
// Everything after the package is passed to the test binary (its flags need the -test. prefix).
package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: wasmbench <package> [test binary flags]")
		os.Exit(2)
	}
	code, err := runIn(context.Background(), os.Args[1], os.Args[2:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wasmbench:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// runIn builds the test binary of the package in directory pkg for wasip1 and runs it with
// args, its output going to out, and returns its exit code.
func runIn(ctx context.Context, pkg string, args []string, out io.Writer) (int, error) {
	wasm, wd, err := buildTests(pkg, out)
	if err != nil {
		return 0, err
	}
	return Run(ctx, wasm, wd, args, out)
}

// buildTests builds the test binary of the package in directory pkg for wasip1 and returns it
// with the package's absolute directory; the go command's output goes to out.
func buildTests(pkg string, out io.Writer) (wasm []byte, wd string, err error) {
	dir, err := os.MkdirTemp("", "wasmbench")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "test.wasm")
	wd, err = filepath.Abs(pkg)
	if err != nil {
		return nil, "", err
	}
	// -trimpath as the module is built (see the Makefile), so that the test binary shares the
	// standard library's wasip1 packages in Go's build cache with it.
	build := exec.Command("go", "test", "-c", "-trimpath", "-o", bin, ".")
	build.Dir = wd
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	build.Stdout, build.Stderr = out, out
	if err := build.Run(); err != nil {
		return nil, "", fmt.Errorf("building %s for wasip1: %w", pkg, err)
	}
	wasm, err = os.ReadFile(bin)
	return wasm, wd, err
}

// Run runs a wasip1 test binary under wazero with its proxy-wasm imports stubbed, its output
// going to out, and returns its exit code. The package's directory wd is mounted at its own
// path and is the binary's working directory, so that tests reading testdata work. The machine
// code goes through the emulator's on-disk compilation cache: a test binary built from
// unchanged sources is byte for byte the same, so only its first run pays for compiling it
// (seconds for a package's tests); the code that runs is the same either way.
func Run(ctx context.Context, wasm []byte, wd string, args []string, out io.Writer) (int, error) {
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(wasmhost.SharedCompilationCache()))
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return 0, err
	}
	if err := stubImports(ctx, rt, cm, "env"); err != nil {
		return 0, err
	}
	cfg := wazero.NewModuleConfig().WithArgs(append([]string{"test.wasm"}, args...)...).
		WithStdout(out).WithStderr(out).WithSysWalltime().WithSysNanotime().WithSysNanosleep().
		WithRandSource(rand.Reader).WithFSConfig(wazero.NewFSConfig().WithDirMount(wd, wd)).WithEnv("PWD", wd)
	_, err = rt.InstantiateModule(ctx, cm, cfg)
	if exit, ok := err.(*sys.ExitError); ok {
		return int(exit.ExitCode()), nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}

// stubImports defines every function that cm imports from module as a function that returns
// zeros: proxy-wasm's Ok status, and no data.
func stubImports(ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule, module string) error {
	b := rt.NewHostModuleBuilder(module)
	n := 0
	for _, f := range cm.ImportedFunctions() {
		if m, name, _ := f.Import(); m != module {
			continue
		} else {
			results := len(f.ResultTypes())
			b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
				for i := range results {
					stack[i] = 0
				}
			}), f.ParamTypes(), f.ResultTypes()).Export(name)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	_, err := b.Instantiate(ctx)
	return err
}
