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
// No crypto package, os or io/fs. crypto/sha256 would bring Go's FIPS 140 module and, through
// the module's self-check and DRBG, os and io/fs, whose initialisers run in every VM's
// _initialize: measured side by side (GOFLAGS=-trimpath GOOS=wasip1 GOARCH=wasm go build
// -buildmode=c-shared; scripts/v8-compile-phases.sh), the .wasm 4,554,740 -> 4,830,848 bytes,
// the code V8 compiles in _initialize 465 -> 503 KB. Redis keys hold the descriptor verbatim
// (sharedstate/redis.AppendKey), the Redis script's EVALSHA name is computed by go generate,
// and random bytes come from math/rand/v2. syscall and internal/godebug are linked only as
// time's dependencies.
func TestModuleLinksNoHeavyPackages(t *testing.T) {
	timeDeps := wasipDeps(t, "time")
	for pkg := range wasipDeps(t, "github.com/ratelimit-wasm/ratelimit") {
		switch {
		case pkg == "fmt", pkg == "encoding/json", pkg == "encoding/hex", pkg == "runtime/debug",
			pkg == "embed", pkg == "crypto", strings.HasPrefix(pkg, "crypto/"), pkg == "os", pkg == "io/fs":
			t.Errorf("the module links %s", pkg)
		case pkg == "syscall", pkg == "internal/godebug":
			if !timeDeps[pkg] {
				t.Errorf("the module links %s, which time does not import", pkg)
			}
		}
	}
}
