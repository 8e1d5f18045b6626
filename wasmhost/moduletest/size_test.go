package moduletest

import (
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// The module's size is mostly what the linker keeps, and a standard package can be kept by a
// use that looks harmless: an embed.FS keeps time's formatting through io/fs.FileInfo, a
// sort.Slice keeps reflection's Swapper and a quicksort per shape, an errors.As keeps
// reflection's assignability checks (docs/BENCHMARKS.md). The
// test reads the function names of the compiled module (its name section) and fails when one
// of those comes back.
func TestModuleLinksNoUnusedStdlib(t *testing.T) {
	t.Parallel()
	names, err := functionNames(wasmtest.BuildModule(t))
	if err != nil {
		t.Fatal(err)
	}
	// The names are read: functions the filter always has are there.
	for _, fn := range []string{
		"github.com/ratelimit-wasm/ratelimit/filter/config.Parse",
		"github.com/ratelimit-wasm/ratelimit/abi.WallClockNanos",
	} {
		if !names[linkerName(fn)] {
			t.Fatalf("the module's name section has no %s (%d names read)", fn, len(names))
		}
	}
	for _, c := range []struct{ fn, why string }{
		{"time.Time.appendFormat", "time formatting (an embed.FS links it through io/fs.FileInfo's ModTime)"},
		{"time.Time.String", "time formatting"},
		{"time.Now", "time's clock (use abi.WallClockNanos)"},
		{"time.Since", "time's clock (use abi.WallClockNanos)"},
		{"embed.FS.ReadFile", "an embed.FS (embed the files as strings)"},
		{"sort.Slice", "sort.Slice (reflection's Swapper: use sort.Stable or sort.Sort with a sort.Interface)"},
		{"sort.SliceStable", "sort.SliceStable (reflection's Swapper: use sort.Stable with a sort.Interface)"},
		{"internal/reflectlite.Swapper", "reflection's Swapper (sort.Slice)"},
		{"slices.pdqsortOrdered[go.shape.string]", "a quicksort of strings of its own (slices.Sort, sort.Strings: use sort.Sort(sort.StringSlice), whose quicksort the module has)"},
		{"internal/reflectlite.implements", "reflection's assignability checks (errors.As; errors.AsType)"},
	} {
		if names[linkerName(c.fn)] {
			t.Errorf("the module links %s: %s", c.fn, c.why)
		}
	}
	// No file is embedded. (Package time is linked for durations, and with it syscall: see the
	// root package's TestModuleLinksNoHeavyPackages.)
	for name := range names {
		if strings.HasPrefix(name, linkerName("embed")+".") {
			t.Errorf("the module links %s (package embed): write the file as a Go constant", name)
		}
	}
}

// linkerName is wasmtest.LinkerName.
func linkerName(name string) string { return wasmtest.LinkerName(name) }

// functionNames returns the set of function names of a module's name section (see
// wasmtest.FunctionNames).
func functionNames(module []byte) (map[string]bool, error) {
	byIndex, err := wasmtest.FunctionNames(module)
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(byIndex))
	for _, n := range byIndex {
		names[n] = true
	}
	return names, nil
}
