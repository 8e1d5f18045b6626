package redis

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// lua.go is what gen_lua.go writes from the Lua files: the files stay the one source that
// people edit, and a stale lua.go (a file edited without `go generate`) fails here. The
// script's SHA-1 in it is checked against crypto/sha1 by TestScripts.
func TestLuaGoIsGenerated(t *testing.T) {
	if runtime.GOOS == "wasip1" {
		t.Skip("runs the go command")
	}
	out := filepath.Join(t.TempDir(), "lua.go")
	cmd := exec.Command("go", "run", "gen_lua.go", "-o", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run gen_lua.go: %v\n%s", err, msg)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("lua.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("lua.go is not what gen_lua.go writes from lua/*.lua: run go generate ./sharedstate/redis")
	}
}
