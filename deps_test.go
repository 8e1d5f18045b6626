package main

import (
	"os/exec"
	"strings"
	"testing"
)

// wasipDeps returns what `go list -deps` gives for pkgs built for wasip1, as a set.
func wasipDeps(t *testing.T, pkgs ...string) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...)
	cmd.Env = append(cmd.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string]bool{}
	for _, pkg := range strings.Fields(string(out)) {
		deps[pkg] = true
	}
	return deps
}

// The module must not link packages whose cost its code does not need.
//
// No fmt, encoding/json, encoding/hex or runtime/debug (the last two import fmt): fmt and
// encoding/json with the reflection they drive were about 0.77 MB of the .wasm and about 60
// ms of the first VM's start on V8. Messages are built with strconv and concatenation, and jsontext
// (github.com/go-json-experiment/json) for the configuration's JSON. reflect itself is
// allowed (encoding/binary imports it) but only a few hundred bytes of it are linked.
//
// No embed: its FS keeps time's formatting through io/fs.FileInfo; sharedstate/redis's Lua
// script is a generated Go constant (lua.go).
//
// time is linked on purpose: durations are time.Duration. Measured side by side against int64
// nanoseconds: the .wasm +239 KB, +22.5 KB (48 functions, 4.7%) of what V8 compiles in the
// first VM's _initialize, the first request unchanged.
//
// crypto/sha256 is linked on purpose (the hashed long Redis keys), and with it Go's FIPS 140
// module and, through the module's self-check and DRBG, time, syscall, os, io/fs and
// internal/godebug, whose initialisers run in every VM's _initialize. Measured side by side against a hand-written SHA-256 (GOOS=wasip1
// GOARCH=wasm go build -buildmode=c-shared; scripts/v8-compile-phases.sh): the .wasm
// 4,157,814 -> 4,649,837 bytes (+492 KB), the code V8 compiles in _initialize 441 -> 503 KB,
// on the first request 70.6 -> 74.4 KB. Those packages are allowed only as crypto/sha256's
// dependencies: no other crypto package (crypto/sha1 in particular: the Redis script's
// EVALSHA name is computed by go generate), and none of time, syscall, os, io/fs or
// internal/godebug (time aside) once crypto/sha256 no longer brings them.
func TestModuleLinksNoHeavyPackages(t *testing.T) {
	sha256Deps := wasipDeps(t, "crypto/sha256")
	for pkg := range wasipDeps(t, "github.com/ratelimit-wasm/ratelimit") {
		switch {
		case pkg == "fmt", pkg == "encoding/json", pkg == "encoding/hex", pkg == "runtime/debug",
			pkg == "embed":
			t.Errorf("the module links %s", pkg)
		case pkg == "crypto" || strings.HasPrefix(pkg, "crypto/"),
			pkg == "syscall", pkg == "os", pkg == "io/fs", pkg == "internal/godebug":
			if !sha256Deps[pkg] {
				t.Errorf("the module links %s, which crypto/sha256 does not import", pkg)
			}
		}
	}
}
