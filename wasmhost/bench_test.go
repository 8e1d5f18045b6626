package wasmhost

import (
	"context"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// Benchmarks of the host itself, with the placeholder module as the guest (the rate limiter's
// own per-request numbers are BenchmarkGuestPerRequest in package filter). Run them with
//
//	go test ./wasmhost -run '^$' -bench . -benchtime 2s
//
// (compile benchmarks run few iterations: one cold compile takes ~0.5 s).

func BenchmarkCompileCold(b *testing.B) {
	wasm := wasmtest.BuildGuest(b, placeholderModule)
	b.SetBytes(int64(len(wasm)))
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(wazero.NewCompilationCache()))
		if _, err := rt.CompileModule(ctx, wasm); err != nil {
			b.Fatal(err)
		}
		_ = rt.Close(ctx)
	}
}

// BenchmarkCompileCachedDir measures a new process's compile when the
// on-disk cache (what SharedCompilationCache uses) is warm.
func BenchmarkCompileCachedDir(b *testing.B) {
	wasm := wasmtest.BuildGuest(b, placeholderModule)
	dir := b.TempDir()
	ctx := context.Background()
	warm, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(warm))
	if _, err := rt.CompileModule(ctx, wasm); err != nil {
		b.Fatal(err)
	}
	_ = rt.Close(ctx)
	_ = warm.Close(ctx)
	b.ReportAllocs()
	for b.Loop() {
		// A fresh cache object per iteration: nothing is shared in memory,
		// only the directory, as for a second process.
		c, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(c))
		if _, err := rt.CompileModule(ctx, wasm); err != nil {
			b.Fatal(err)
		}
		_ = rt.Close(ctx)
		_ = c.Close(ctx)
	}
}

// BenchmarkCompileCachedMemory measures a second Host in the same process
// (the in-memory engine of the shared cache already holds the code).
func BenchmarkCompileCachedMemory(b *testing.B) {
	wasm := wasmtest.BuildGuest(b, placeholderModule)
	ctx := context.Background()
	cache := wazero.NewCompilationCache()
	defer cache.Close(ctx)
	cfg := wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache)
	warm := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer warm.Close(ctx)
	if _, err := warm.CompileModule(ctx, wasm); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rt := wazero.NewRuntimeWithConfig(ctx, cfg)
		if _, err := rt.CompileModule(ctx, wasm); err != nil {
			b.Fatal(err)
		}
		_ = rt.Close(ctx)
	}
}

// BenchmarkInstantiateInitialize is instantiate + _initialize of one VM.
func BenchmarkInstantiateInitialize(b *testing.B) {
	h := newTestHost(b, wasmtest.BuildGuest(b, placeholderModule), Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		v := &vm{h: h, idx: -2, nextID: 1, streams: map[uint32]*stream{}, quit: make(chan struct{})}
		v.ctx = experimental.WithMemoryAllocator(context.WithValue(context.Background(), vmKey{}, v), memoryAllocator)
		mod, err := h.rt.InstantiateModule(v.ctx, h.cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
		if err != nil {
			b.Fatal(err)
		}
		v.mod, v.mem = mod, mod.Memory()
		v.restrict = restrictStart
		if _, err := v.invoke(mod.ExportedFunction("_initialize")); err != nil {
			b.Fatal(err)
		}
		v.restrict = restrictNone
		_ = mod.Close(ctx)
	}
}

// BenchmarkNewVM is a full Envoy-style VM bring-up: instantiate,
// _initialize, root context, on_vm_start, on_configure.
func BenchmarkNewVM(b *testing.B) {
	h := newTestHost(b, wasmtest.BuildGuest(b, placeholderModule), Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		v, err := h.newVM(ctx, -2)
		if err != nil {
			b.Fatal(err)
		}
		v.close()
	}
}

// BenchmarkPlaceholderRequest runs the placeholder filter's counting path
// (request headers with a shared-data CAS increment and a header added,
// response headers, log/done/delete) through Do on one worker. guest-ns/op
// is the time spent inside the VM per request; the rest of ns/op is the
// host's stream machinery and the hop to the VM's loop.
func BenchmarkPlaceholderRequest(b *testing.B) {
	h := newTestHost(b, wasmtest.BuildGuest(b, placeholderModule), Options{VMID: "bench"})
	ctx := context.Background()
	req := Request{Worker: 0, Path: "/bench", Headers: [][2]string{{"user-agent", "bench"}}}
	if _, err := h.Do(ctx, req); err != nil {
		b.Fatal(err)
	}
	// Stop the placeholder's 100 ms tick from being counted.
	h.vms[0].post(ctx, func() { h.vms[0].setTickPeriod(0) })
	start := h.Stats().GuestTime
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Do(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(h.Stats().GuestTime-start)/float64(b.N), "guest-ns/op")
}
