package sha

import (
	"os/exec"
	"strings"
	"testing"
)

// The module must link no crypto package: any one of them (crypto/sha256, crypto/sha1,
// crypto/rand, ...) brings Go's FIPS 140 module back, about 0.2 MB of the .wasm. Use this
// package for SHA-256 and SHA-1 and math/rand/v2 for random bytes instead.
func TestModuleLinksNoCrypto(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "github.com/ratelimit-wasm/ratelimit")
	cmd.Env = append(cmd.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "crypto" || strings.HasPrefix(pkg, "crypto/") {
			t.Errorf("the module links %s", pkg)
		}
	}
}
