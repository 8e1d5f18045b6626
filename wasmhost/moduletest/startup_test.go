package moduletest

import (
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// TestModuleLinksNoTableInitialisers checks, in the compiled module's name section, that no
// package initialiser builds a table map: package unicode's map initialisers
// (unicode.Categories, Scripts, FoldCategory, FoldScript, CategoryAliases: about 62 KB of
// code, linked when anything reads those maps; internal/regexp looks its \p{Name} tables up
// through a generated switch instead), the regexp copy's own table maps and filter/config's
// (units, placeholders, reserved headers: switches too). An initialiser's code is compiled
// and run in every VM's _initialize (see filter/doc.go).
func TestModuleLinksNoTableInitialisers(t *testing.T) {
	t.Parallel()
	names, err := functionNames(wasmtest.BuildModule(t))
	if err != nil {
		t.Fatal(err)
	}
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
