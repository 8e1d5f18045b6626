package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The documentation cites tests by name (to run, or as the proof of a promise); a renamed or
// removed test leaves a reader with a name that runs nothing. Every Test, Benchmark or Fuzz
// name the README and docs cite must be a function of some test file of the repository (a
// name ending in '*' is a prefix, as in `TestVirtualClock*`; a "/subtest" suffix is ignored).
func TestDocsCiteExistingTests(t *testing.T) {
	defined := map[string]bool{}
	funcRe := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "build") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcRe.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob("docs/*.md")
	docs = append(docs, "README.md", "wasmhost/README.md")
	citeRe := regexp.MustCompile(`\b((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)(\*?)`)
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range citeRe.FindAllSubmatch(b, -1) {
			name, prefix := string(m[1]), len(m[2]) > 0
			found := defined[name]
			for d := range defined {
				if found || !prefix {
					break
				}
				found = strings.HasPrefix(d, name)
			}
			if !found {
				t.Errorf("%s cites %s, which no test file defines", doc, name)
			}
		}
	}
}
