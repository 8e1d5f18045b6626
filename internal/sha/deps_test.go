package sha

import (
	"os/exec"
	"strings"
	"testing"
)

// The module must link no crypto package: any one of them (crypto/sha256, crypto/sha1,
// crypto/rand, ...) brings Go's FIPS 140 module back, about 0.2 MB of the .wasm. Use this
// package for SHA-256 and SHA-1 and math/rand/v2 for random bytes instead.
//
// Nor fmt, encoding/json, encoding/hex or runtime/debug (the last two import fmt): fmt and
// encoding/json with the reflection they drive were about 0.77 MB of the .wasm and about 60
// ms of the first VM's start on V8. Use internal/strfmt for messages, and the configuration
// package's own JSON scanner and writer. reflect itself stays in the list (encoding/binary
// imports it) but only a few hundred bytes of it are linked.
//
// Nor time, nor what it brings: syscall (whose initialisers query the stdio flags, the
// preopened directories and the environment), internal/godebug, os, and io/fs and embed (io/fs
// imports time). Their initialisers and first calls were about 60 functions and 23 KB of code
// that V8 compiled in every VM's _initialize. Use internal/duration for durations,
// abi.WallClockNanos for the clock, and Go string constants for files (sharedstate/redis's
// lua.go).
func TestModuleLinksNoHeavyPackages(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "github.com/ratelimit-wasm/ratelimit")
	cmd.Env = append(cmd.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case pkg == "crypto" || strings.HasPrefix(pkg, "crypto/"),
			pkg == "fmt", pkg == "encoding/json", pkg == "encoding/hex", pkg == "runtime/debug",
			pkg == "time", pkg == "syscall", pkg == "internal/godebug", pkg == "os",
			pkg == "io/fs", pkg == "embed":
			t.Errorf("the module links %s", pkg)
		}
	}
}
