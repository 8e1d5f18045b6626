package moduletest

import (
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// TestModuleLinksNoTableInitialisers checks, in the compiled module's name section, that the
// package initialisers issue 14 moved out stay out: package unicode's map initialisers
// (unicode.Categories, Scripts, FoldCategory, FoldScript, CategoryAliases: about 62 KB of
// code, linked when anything reads those maps; internal/regexp looks its \p{Name} tables up
// through a generated switch instead), the regexp copy's own table maps and filter/config's
// (units, placeholders, reserved headers: switches too). Envoy's V8
// compiles each function on its first call, so an initialiser's code is compiled and run in
// every VM's _initialize.
func TestModuleLinksNoTableInitialisers(t *testing.T) {
	names := functionNames(t, wasmtest.BuildModule(t))
	if len(names) < 1000 || !names["runtime.init"] {
		t.Fatalf("the name section lists %d functions, without runtime.init: not read correctly", len(names))
	}
	for name := range names {
		if strings.HasPrefix(name, "unicode.map.init") || strings.HasPrefix(name, "regexp") ||
			strings.HasPrefix(name, "github.com_ratelimit_wasm_ratelimit_internal_regexp_syntax.map.init") ||
			strings.HasPrefix(name, "github.com_ratelimit_wasm_ratelimit_filter_config.map.init") {
			t.Errorf("the module links %s", name)
		}
	}
}

// functionNames returns the function names of a module's "name" custom section (the
// WebAssembly core specification, appendix "Name section", subsection 1).
func functionNames(t *testing.T, mod []byte) map[string]bool {
	t.Helper()
	if len(mod) < 8 || string(mod[:4]) != "\x00asm" {
		t.Fatal("not a WebAssembly module")
	}
	r := &reader{b: mod[8:]}
	for len(r.b) > 0 && !r.bad {
		id := r.byte()
		body := r.bytes(int(r.uleb()))
		if id != 0 { // not a custom section
			continue
		}
		s := &reader{b: body}
		if string(s.bytes(int(s.uleb()))) != "name" {
			continue
		}
		for len(s.b) > 0 && !s.bad {
			sub := s.byte()
			data := &reader{b: s.bytes(int(s.uleb()))}
			if sub != 1 {
				continue
			}
			names := map[string]bool{}
			for n := data.uleb(); n > 0 && !data.bad; n-- {
				data.uleb() // the function index
				names[string(data.bytes(int(data.uleb())))] = true
			}
			if data.bad {
				t.Fatal("malformed function names")
			}
			return names
		}
	}
	t.Fatal("the module has no function names (built without a name section?)")
	return nil
}

// reader reads a module's bytes; a read past the end sets bad and yields zeros.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uleb() uint64 {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		c := r.byte()
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
	r.bad = true
	return 0
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || n > len(r.b) {
		r.bad = true
		r.b = nil
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}
