package moduletest

import (
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// TestModuleLinksNoTableInitialisers checks, in the compiled module's name section, that
// filter/config builds no maps in its initialiser (units, placeholders, reserved headers are
// switches): an initialiser's code is compiled and run in every VM's _initialize (see
// filter/doc.go). The standard regexp's tables are the exception the module accepts:
// regexp/syntax reads package unicode's maps (Categories, Scripts, ...) for \p{Name}, which
// links their initialisers (unicode.map.init.*, regexp_syntax.map.init.*).
func TestModuleLinksNoTableInitialisers(t *testing.T) {
	t.Parallel()
	names, err := functionNames(wasmtest.BuildModule(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 1000 || !names["runtime.init"] {
		t.Fatalf("the name section lists %d functions, without runtime.init: not read correctly", len(names))
	}
	const pkg = "github.com_ratelimit_wasm_ratelimit_filter_config."
	found := false
	for name := range names {
		found = found || strings.HasPrefix(name, pkg)
		if strings.HasPrefix(name, pkg+"map.init") {
			t.Errorf("the module links %s", name)
		}
	}
	if !found {
		t.Fatalf("no function named %s*: the package's functions are not named as this test expects", pkg)
	}
}
