package moduletest

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// The module's size is mostly what the linker keeps, and a standard package can be kept by a
// use that looks harmless: an embed.FS kept time's formatting through io/fs.FileInfo, a
// sort.Slice kept reflection's Swapper and a quicksort per shape, an errors.As kept
// reflection's assignability checks (issue 14, docs/BENCHMARKS.md "Size, fourth pass"). The
// test reads the function names of the compiled module (its name section) and fails when one
// of those comes back.
func TestModuleLinksNoUnusedStdlib(t *testing.T) {
	names, err := functionNames(wasmtest.BuildModule(t))
	if err != nil {
		t.Fatal(err)
	}
	// The names are read: functions the filter always has are there.
	for _, fn := range []string{
		"github.com/ratelimit-wasm/ratelimit/filter/config.Parse",
		"time.Now",
	} {
		if !names[linkerName(fn)] {
			t.Fatalf("the module's name section has no %s (%d names read)", fn, len(names))
		}
	}
	for _, c := range []struct{ fn, why string }{
		{"time.Time.appendFormat", "time formatting (an embed.FS links it through io/fs.FileInfo's ModTime)"},
		{"time.Time.String", "time formatting"},
		{"embed.FS.ReadFile", "an embed.FS (embed the files as strings)"},
		{"sort.Slice", "sort.Slice (the configuration's lists are short: insertionSort)"},
		{"sort.SliceStable", "sort.SliceStable (insertionSort)"},
		{"internal/reflectlite.Swapper", "reflection's Swapper (sort.Slice)"},
		{"slices.pdqsortOrdered[go.shape.string]", "a quicksort of strings (slices.Sort; sortStrings)"},
		{"internal/reflectlite.implements", "reflection's assignability checks (errors.As; errors.AsType)"},
	} {
		if names[linkerName(c.fn)] {
			t.Errorf("the module links %s: %s", c.fn, c.why)
		}
	}
}

// linkerName is a function's name as the Go linker writes it in the name section: every
// character other than an ASCII letter, a digit, '_' or '.' becomes '_' (cmd/link/internal/wasm
// replaces each match of `[^\w.]`).
func linkerName(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, name)
}

// functionNames returns the function names of a module's name section (the WebAssembly
// specification's custom section "name", subsection 1), which the Go linker writes unless
// -ldflags=-s is given.
func functionNames(module []byte) (map[string]bool, error) {
	errBad := errors.New("malformed module")
	r := module
	if len(r) < 8 || string(r[:4]) != "\x00asm" {
		return nil, errBad
	}
	r = r[8:]
	// uvarint reads an unsigned LEB128 number (binary.Uvarint reads the same encoding).
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, false
		}
		r = r[n:]
		return v, true
	}
	for len(r) > 0 {
		id := r[0]
		r = r[1:]
		size, ok := uvarint()
		if !ok || size > uint64(len(r)) {
			return nil, errBad
		}
		sec := r[:size]
		r = r[size:]
		if id != 0 {
			continue
		}
		rest := r
		r = sec
		nameLen, ok := uvarint()
		if !ok || nameLen > uint64(len(r)) || string(r[:nameLen]) != "name" {
			r = rest
			continue
		}
		r = r[nameLen:]
		for len(r) > 0 {
			sub := r[0]
			r = r[1:]
			subSize, ok := uvarint()
			if !ok || subSize > uint64(len(r)) {
				return nil, errBad
			}
			if sub != 1 {
				r = r[subSize:]
				continue
			}
			r = r[:subSize]
			count, ok := uvarint()
			if !ok {
				return nil, errBad
			}
			names := make(map[string]bool, count)
			for range count {
				if _, ok := uvarint(); !ok { // the function index
					return nil, errBad
				}
				n, ok := uvarint()
				if !ok || n > uint64(len(r)) {
					return nil, errBad
				}
				names[string(r[:n])] = true
				r = r[n:]
			}
			return names, nil
		}
		return nil, errors.New("the name section has no function names")
	}
	return nil, errors.New("the module has no name section")
}
