// Package wasmtest builds the filter's .wasm module (and test guests) for
// tests and benchmarks, once per source change.
//
// Modules are built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath
//
// as `make build` builds the shipped module, so the tests run the same bytes
// and share the compiled packages in Go's build cache with it. They go into
// build/cache/ under the repository root, named by a hash of exactly the
// files that go into the build (as listed by go list -deps), so a test run
// rebuilds only when the guest's sources changed. A file lock keeps parallel
// test binaries (go test ./... runs packages in parallel) from building the
// same module twice.
package wasmtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// ModuleRoot returns the repository root: the nearest directory above the working directory
// (a test's package directory) that holds go.work. It does not ask the binary where its
// source was, so that tests built with -trimpath (make test) find it too.
func ModuleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}

// BuildModule returns the filter module built from the repository root
// package, building it when missing or stale. It fails the test on error.
func BuildModule(t testing.TB) []byte {
	t.Helper()
	return BuildGuest(t, ".")
}

// BuildGuest builds the package main in pkg (a path relative to the
// repository root, e.g. "./wasmhost/testdata/abiguest") as a wasip1 reactor
// and returns the module bytes, read once per build and shared by every
// caller of the process: callers must not modify them. It fails the test on
// error.
func BuildGuest(t testing.TB, pkg string) []byte {
	t.Helper()
	path, err := BuildFile(pkg)
	if err != nil {
		t.Fatalf("wasmtest: %v", err)
	}
	readMu.Lock()
	defer readMu.Unlock()
	if b, ok := read[path]; ok {
		return b
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("wasmtest: %v", err)
	}
	read[path] = b
	return b
}

var (
	readMu sync.Mutex
	// read holds the bytes of each module file BuildGuest has read, by path: a test package
	// asks for the 5 MB filter module in nearly every test.
	read = map[string][]byte{}
)

// A target is what a build produces: a wasip1 reactor, or a command for this machine.
type target struct {
	env   []string // GOOS and GOARCH
	flags []string // go build flags
	ext   string   // the file name's extension
}

var (
	// reactor is how every module is built: the flags of the Makefile's build of the shipped
	// module, without its version control stamp (the commit, its time, whether the tree was
	// modified). The module is then what its sources make, as the cache's key says, and so is
	// wazero's compilation of it: a new commit or a fresh clone with the same sources finds it
	// in wazero's cache rather than compiling it again, seconds of CPU in each test process.
	reactor = target{env: []string{"GOOS=wasip1", "GOARCH=wasm"}, flags: []string{"-buildmode=c-shared", "-trimpath", "-buildvcs=false"}, ext: ".wasm"}
	// command is a program of the repository built to run on this machine, unstamped for the
	// same reason.
	command = target{env: []string{"GOOS=" + runtime.GOOS, "GOARCH=" + runtime.GOARCH}, flags: []string{"-buildvcs=false"}}
)

var (
	memoMu sync.Mutex
	memo   = map[string]string{}
)

// BuildFile builds pkg (relative to the repository root) if needed and
// returns the path of the cached .wasm file.
func BuildFile(pkg string) (string, error) {
	return build(reactor, pkg)
}

// BuildCommand builds the command in pkg (relative to the repository root, e.g.
// "./wasmhost/cmd/ratelimit-host") for this machine if needed and returns the path of the
// cached binary: the tests of several packages that run a command link it once between them,
// and again only when its sources change. It fails the test on error.
func BuildCommand(t testing.TB, pkg string) string {
	t.Helper()
	path, err := build(command, pkg)
	if err != nil {
		t.Fatalf("wasmtest: %v", err)
	}
	return path
}

func build(tg target, pkg string) (string, error) {
	memoMu.Lock()
	defer memoMu.Unlock()
	key := strings.Join(tg.env, " ") + " " + pkg
	if p, ok := memo[key]; ok {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	root := ModuleRoot()
	sum, err := sourceHash(root, tg, pkg)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "build", "cache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := strings.Trim(strings.NewReplacer("/", "_", ".", "").Replace(pkg), "_")
	if name == "" {
		name = "ratelimit"
	}
	out := filepath.Join(dir, fmt.Sprintf("%s-%s%s", name, sum[:16], tg.ext))
	if _, err := os.Stat(out); err == nil {
		memo[key] = out
		return out, nil
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(out); err == nil { // another process built it meanwhile
		memo[key] = out
		return out, nil
	}
	tmp := out + ".tmp"
	cmd := exec.Command("go", append(append([]string{"build"}, tg.flags...), "-o", tmp, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), tg.env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("%s go build %s %s: %v\n%s", strings.Join(tg.env, " "), strings.Join(tg.flags, " "), pkg, err, buf.String())
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	memo[key] = out
	pruneStale(dir, name, tg.ext, out)
	return out, nil
}

// pruneStale removes builds of the same package from older sources, so the
// cache does not grow with every edit. Files younger than ten minutes stay:
// another test binary may still be about to read them.
func pruneStale(dir, name, ext, keep string) {
	old, _ := filepath.Glob(filepath.Join(dir, name+"-"+strings.Repeat("?", 16)+ext))
	for _, f := range old {
		if f == keep {
			continue
		}
		if st, err := os.Stat(f); err == nil && time.Since(st.ModTime()) > 10*time.Minute {
			_ = os.Remove(f)
		}
	}
}

// goVersion is the version of the go command on the PATH, the one that builds, asked once per
// process.
var goVersion = sync.OnceValue(func() string {
	ver, _ := exec.Command("go", "env", "GOVERSION").Output()
	return string(bytes.TrimSpace(ver))
})

// sourceHash hashes the Go toolchain version, the target and every
// non-standard file its build of pkg uses (Go files, embedded files, and the
// root's go.mod, go.sum, go.work and go.work.sum).
func sourceHash(root string, tg target, pkg string) (string, error) {
	// -buildvcs=false: with -trimpath (the Makefile's GOFLAGS), go list would otherwise ask git
	// for the main module's version, seven git commands a listing.
	cmd := exec.Command("go", "list", "-buildvcs=false", "-deps",
		"-f", `{{if not .Standard}}{{.Dir}}{{range .GoFiles}}|{{.}}{{end}}{{range .CgoFiles}}|{{.}}{{end}}{{range .EmbedFiles}}|{{.}}{{end}}{{end}}`, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), tg.env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	listing, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -deps %s: %v\n%s", pkg, err, stderr.String())
	}
	var files []string
	for _, line := range strings.Split(string(listing), "\n") {
		parts := strings.Split(strings.TrimSpace(line), "|")
		if len(parts) < 2 {
			continue
		}
		for _, f := range parts[1:] {
			files = append(files, filepath.Join(parts[0], f))
		}
	}
	for _, f := range []string{"go.mod", "go.sum", "go.work", "go.work.sum"} {
		files = append(files, filepath.Join(root, f))
	}
	sort.Strings(files)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%q\x00%q\x00%s\x00", goVersion(), tg.env, tg.flags, pkg)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return "", err
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintf(h, "%s\x00", rel)
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
