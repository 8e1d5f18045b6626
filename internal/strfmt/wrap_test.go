package strfmt

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestWrapAsErrorf checks that Wrap gives what Errorf("%w"+suffix, err) gives: the same
// message, and an error that wraps err (errors.Is, errors.Unwrap).
func TestWrapAsErrorf(t *testing.T) {
	base := errors.New("redis: malformed answer")
	for _, suffix := range []string{"", ": the answer carries another rule's limit", " (x)"} {
		got, want := Wrap(base, suffix), Errorf("%w"+suffix, base)
		if got.Error() != want.Error() {
			t.Errorf("Wrap(%q) = %q, Errorf gives %q", suffix, got, want)
		}
		if !errors.Is(got, base) || errors.Unwrap(got) != base {
			t.Errorf("Wrap(%q) does not wrap its error", suffix)
		}
	}
}

// TestNoFormattingInPackageInitialisers checks that no package-level variable and no init
// function of the product module calls strfmt's formatting (Sprintf, Append, Errorf). Envoy's
// V8 compiles each function on its first call, so one such call in an initialiser compiles
// strfmt's printer (about 45 KB of code) in every VM's _initialize; Wrap and errors.New need
// no formatting.
func TestNoFormattingInPackageInitialisers(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// The emulator and e2e are modules of their own and never in the .wasm.
			switch rel, _ := filepath.Rel(root, path); rel {
			case "wasmhost", "e2e", "build", ".git", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		for _, decl := range f.Decls {
			var body ast.Node
			switch decl := decl.(type) {
			case *ast.GenDecl:
				if decl.Tok != token.VAR {
					continue
				}
				body = decl
			case *ast.FuncDecl:
				if decl.Name.Name != "init" || decl.Recv != nil {
					continue
				}
				body = decl.Body
			}
			if body == nil {
				continue
			}
			ast.Inspect(body, func(n ast.Node) bool {
				if _, ok := n.(*ast.FuncLit); ok {
					return false // a function value is not run by the initialiser
				}
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "strfmt" && sel.Sel.Name != "Wrap" {
						t.Errorf("%s: a package initialiser calls strfmt.%s", fset.Position(call.Pos()), sel.Sel.Name)
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("only %d files checked: is the walk at the repository root?", checked)
	}
}
