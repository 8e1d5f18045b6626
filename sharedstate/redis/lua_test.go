package redis

import (
	"os"
	"path/filepath"
	"testing"
)

// The constants of lua.go are the Lua files byte for byte: the files stay the one source
// that people edit, and a stale lua.go (a file edited without `go generate`) fails here.
func TestLuaConstantsAreTheFiles(t *testing.T) {
	consts := map[string]string{
		"lib.lua": luaLib, "window.lua": luaWindow, "bucket.lua": luaBucket,
		"fixed_window.lua": luaFixedWindow, "sliding_window_counter.lua": luaSlidingWindowCounter,
		"sliding_window_log.lua": luaSlidingWindowLog, "gcra.lua": luaGCRA, "main.lua": luaMain,
		"secret.lua": luaSecret,
	}
	files, err := filepath.Glob("lua/*.lua")
	if err != nil || len(files) != len(consts) {
		t.Fatalf("lua/*.lua: %d files (%v), %d constants: add a new file to gen_lua.go", len(files), err, len(consts))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := consts[filepath.Base(f)]
		if !ok {
			t.Errorf("%s has no constant: add it to gen_lua.go", f)
		} else if c != string(src) {
			t.Errorf("the constant of %s differs from the file: run go generate ./sharedstate/redis", f)
		}
	}
}
