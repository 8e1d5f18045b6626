package filter

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestFileCallsAreAcyclic holds the package's layout (doc.go): each file is one path of a
// request, and no file calls a function of a file that calls one of its own, directly or
// through other files, so that a file can be read knowing only the files below it. A file
// calls another when it calls, or takes as a value, a function or method declared there. The
// non-test files that the native build compiles are type-checked, and every cycle of the
// file-level call graph is named with a call site per step; the wasip1 build's too when its
// files differ (type-checking it needs every dependency compiled for wasip1, which from an
// empty build cache is compiled a second time beside the .wasm's build).
func TestFileCallsAreAcyclic(t *testing.T) {
	targets := []string{runtime.GOOS + "/" + runtime.GOARCH}
	if goFiles(t, "wasip1/wasm") != goFiles(t, targets[0]) {
		targets = append(targets, "wasip1/wasm")
	}
	for _, target := range targets {
		t.Run(strings.ReplaceAll(target, "/", "-"), func(t *testing.T) {
			calls, files := fileCalls(t, target)
			for _, cycle := range fileCycles(calls, files) {
				t.Errorf("%s: the files call each other: %s", target, cycle)
			}
		})
	}
}

// goFiles lists the package's non-test files that the go command compiles for target.
func goFiles(t *testing.T, target string) string {
	goos, goarch, _ := strings.Cut(target, "/")
	cmd := exec.Command("go", "list", "-f", `{{join .GoFiles " "}}`, ".")
	cmd.Env = append(cmd.Environ(), "GOOS="+goos, "GOARCH="+goarch)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list for %s: %v", target, err)
	}
	return string(out)
}

// fileCalls type-checks the package's files that the go command compiles for target
// ("GOOS/GOARCH"), its imports read from their export data, and returns for each file (by
// base name) the files it calls, each with its first call site, and the files.
func fileCalls(t *testing.T, target string) (map[string]map[string]string, []string) {
	goos, goarch, _ := strings.Cut(target, "/")
	cmd := exec.Command("go", "list", "-export", "-deps", "-f",
		`{{.ImportPath}}|{{.Export}}|{{if not .DepOnly}}{{.Dir}}|{{join .GoFiles "|"}}{{end}}`, ".")
	cmd.Env = append(cmd.Environ(), "GOOS="+goos, "GOARCH="+goarch)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list for %s: %v", target, err)
	}
	exports := map[string]string{}
	var path, dir string
	var names []string
	for line := range strings.Lines(string(out)) {
		fields := strings.Split(strings.TrimSpace(line), "|")
		exports[fields[0]] = fields[1]
		if len(fields) > 3 {
			path, dir, names = fields[0], fields[2], fields[3:]
		}
	}
	lookup := func(path string) (io.ReadCloser, error) { return os.Open(exports[path]) }
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	pkg, err := conf.Check(path, fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]map[string]string{}
	for id, obj := range info.Uses {
		fn, ok := obj.(*types.Func)
		if !ok || fn.Pkg() != pkg {
			continue
		}
		at, decl := fset.Position(id.Pos()), fset.Position(fn.Origin().Pos())
		from, to := filepath.Base(at.Filename), filepath.Base(decl.Filename)
		if from == to {
			continue
		}
		if calls[from] == nil {
			calls[from] = map[string]string{}
		}
		site := fmt.Sprintf("%s:%d %s", from, at.Line, fn.Name())
		if prev, ok := calls[from][to]; !ok || site < prev {
			calls[from][to] = site
		}
	}
	return calls, names
}

// fileCycles returns one cycle through each strongly connected component of more than one
// file (Tarjan's algorithm), as "a.go -> b.go (a.go:12 f) -> a.go (b.go:34 g)", with the
// component's files.
func fileCycles(calls map[string]map[string]string, files []string) []string {
	callees := func(f string) []string {
		var to []string
		for g := range calls[f] {
			to = append(to, g)
		}
		slices.Sort(to)
		return to
	}
	index, low, onStack := map[string]int{}, map[string]int{}, map[string]bool{}
	var stack []string
	var cycles []string
	var visit func(f string)
	visit = func(f string) {
		index[f], low[f] = len(index), len(index)
		stack = append(stack, f)
		onStack[f] = true
		for _, g := range callees(f) {
			if _, seen := index[g]; !seen {
				visit(g)
				low[f] = min(low[f], low[g])
			} else if onStack[g] {
				low[f] = min(low[f], index[g])
			}
		}
		if low[f] != index[f] {
			return
		}
		component := map[string]bool{}
		for {
			g := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[g], component[g] = false, true
			if g == f {
				break
			}
		}
		if len(component) > 1 {
			members := slices.Sorted(maps.Keys(component))
			cycles = append(cycles, shortestCycle(f, component, callees, calls)+
				fmt.Sprintf("; %d files call each other around: %s", len(members), strings.Join(members, " ")))
		}
	}
	for _, f := range files {
		if _, seen := index[f]; !seen {
			visit(f)
		}
	}
	return cycles
}

// shortestCycle returns a shortest cycle from f back to f within component, breadth first.
func shortestCycle(f string, component map[string]bool, callees func(string) []string, calls map[string]map[string]string) string {
	prev := map[string]string{}
	queue := []string{f}
	for len(queue) > 0 {
		g := queue[0]
		queue = queue[1:]
		for _, h := range callees(g) {
			if !component[h] {
				continue
			}
			if h == f {
				path := []string{f + " (" + calls[g][f] + ")"}
				for ; g != f; g = prev[g] {
					path = append(path, g+" ("+calls[prev[g]][g]+")")
				}
				slices.Reverse(path)
				return f + " -> " + strings.Join(path, " -> ")
			}
			if _, seen := prev[h]; !seen && h != f {
				prev[h] = g
				queue = append(queue, h)
			}
		}
	}
	return f
}
