package main

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outOfLineClaim matches a doc comment that says its function is kept out of its callers'
// code: "out of line", "out of decideFrom's line", "not inlined".
var outOfLineClaim = regexp.MustCompile(`(?i)\bout[\s-]+of[\s-]+(?:\w+'s\s+)?line\b|\bnot\s+inlined\b`)

// filter/doc.go keeps cold code out of line so that V8, which compiles a function when it is
// first called, does not compile it with its hot caller; a comment that says a function is
// out of line tells a maintainer that it costs nothing on the hot path. The comments must
// agree with the compiler: no function whose doc comment says it is out of line (or not
// inlined) may be inlined anywhere in the product built for wasip1 (go build -gcflags=-m).
func TestOutOfLineCommentsMatchInlining(t *testing.T) {
	// The module's packages that the .wasm links, and no others: the test-support packages
	// (filtertest, storetest) import testing and testify, whose wasip1 compile (net/http, TLS)
	// the .wasm's build never does.
	var pkgs []string
	for pkg := range wasipDeps(t, ".") {
		if pkg == "github.com/ratelimit-wasm/ratelimit" || strings.HasPrefix(pkg, "github.com/ratelimit-wasm/ratelimit/") {
			pkgs = append(pkgs, pkg)
		}
	}
	cmd := exec.Command("go", append([]string{"build", "-gcflags=-m"}, pkgs...)...)
	cmd.Env = append(cmd.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	claims := outOfLineFuncs(t)
	if len(claims) == 0 {
		t.Fatal("no function's doc comment says it is out of line")
	}
	// "filter/plugin.go:418:21: inlining call to newUsageRule", or "... to (*applied).keepKey",
	// "... to config.(*Rule).Cost", "... to escape[go.shape.[]uint8]"; the file is relative to
	// the module or, under -trimpath, prefixed by the module path.
	callRe := regexp.MustCompile(`(?m)^(?:\./)?(?:github\.com/ratelimit-wasm/ratelimit/)?(\S+\.go):\d+:\d+: inlining call to (\S+)$`)
	calls := callRe.FindAllSubmatch(out, -1)
	if len(calls) == 0 {
		t.Fatalf("go build -gcflags=-m reported no inlined call:\n%s", out)
	}
	reported := map[string]bool{}
	for _, m := range calls {
		dir, name := filepath.Dir(string(m[1])), string(m[2])
		if i := strings.IndexByte(name, '['); i >= 0 {
			name = name[:i]
		}
		name = strings.NewReplacer("(*", "", ")", "").Replace(name)
		key := dir + " " + name // a function of the caller's package
		if _, ok := claims[key]; !ok {
			// Another package's, qualified by its package name: "config.Rule.Cost".
			if pkg, rest, ok := strings.Cut(name, "."); ok {
				for k := range claims {
					d, n, _ := strings.Cut(k, " ")
					if n == rest && filepath.Base(d) == pkg {
						key = k
					}
				}
			}
		}
		if pos, ok := claims[key]; ok && !reported[key] {
			reported[key] = true
			t.Errorf("%s: the doc comment of %s says it is out of line, but %s:%s inlines it",
				pos, name[strings.LastIndexByte(name, '.')+1:], m[1], strings.SplitN(string(m[0]), ":", 3)[1])
		}
	}
}

// outOfLineFuncs returns the functions of the product's non-test wasip1 files whose doc
// comment says they are out of line, keyed by "dir name" or "dir Type.Method", with their
// position.
func outOfLineFuncs(t *testing.T) map[string]string {
	t.Helper()
	claims := map[string]string{}
	wasip1 := build.Default
	wasip1.GOOS, wasip1.GOARCH = "wasip1", "wasm"
	fset := token.NewFileSet()
	for _, root := range []string{".", "abi", "algorithms", "filter", "sharedstate"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && root == "." && path != "." {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			if ok, err := wasip1.MatchFile(filepath.Dir(path), d.Name()); err != nil || !ok {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Doc == nil || !outOfLineClaim.MatchString(fn.Doc.Text()) {
					continue
				}
				name := fn.Name.Name
				if fn.Recv != nil && len(fn.Recv.List) == 1 {
					name = recvType(fn.Recv.List[0].Type) + "." + name
				}
				claims[filepath.Dir(path)+" "+name] = fset.Position(fn.Pos()).String()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return claims
}

// recvType returns the name of a receiver's type: T for T, *T, T[P] and *T[P].
func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
