package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
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

// The README and the docs link to each other, to files of the repository and to sections by
// their anchors; a renamed file or heading leaves a reader with a link to nothing. Every
// relative link of the README and docs must name a file that exists, and an anchor must be a
// heading of that file (GitHub's anchor: the heading lower-cased, punctuation other than '-'
// and '_' dropped, spaces as '-'). Links inside code blocks are not links and are skipped.
func TestDocsLinksResolve(t *testing.T) {
	docs, _ := filepath.Glob("docs/*.md")
	docs = append(docs, "README.md", "wasmhost/README.md")
	codeRe := regexp.MustCompile("(?s)```.*?```")
	headingRe := regexp.MustCompile(`(?m)^#+ (.*)$`)
	linkRe := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchor := func(heading string) string {
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		return b.String()
	}
	anchors := func(file string) map[string]bool {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		set := map[string]bool{}
		for _, m := range headingRe.FindAllStringSubmatch(codeRe.ReplaceAllString(string(b), ""), -1) {
			set[anchor(m[1])] = true
		}
		return set
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRe.FindAllStringSubmatch(codeRe.ReplaceAllString(string(b), ""), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(link, "#")
			target := doc
			if path != "" {
				target = filepath.Join(filepath.Dir(doc), path)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which does not exist", doc, link)
				continue
			}
			if frag != "" && strings.HasSuffix(target, ".md") && !anchors(target)[frag] {
				t.Errorf("%s links to %s, which is no heading of %s", doc, link, target)
			}
		}
	}
}

// The docs name the repository's files to read or edit, in backquotes; a renamed, moved or
// removed file leaves a maintainer with a path to nothing. Every backquoted relative path of
// the README and docs that names a file of the repository (it has a '/' and ends in .go, .md,
// .json, .sh, .lua or .yaml, optionally with a ":line") must exist, from the repository's root
// or from the doc's directory. Placeholders ("algorithms/<name>.go") and globs are skipped.
func TestDocsCiteExistingPaths(t *testing.T) {
	docs, _ := filepath.Glob("docs/*.md")
	docs = append(docs, "README.md", "wasmhost/README.md")
	codeRe := regexp.MustCompile("(?s)```.*?```")
	pathRe := regexp.MustCompile("`([^`\\s]*/[^`\\s]*\\.(?:go|md|json|sh|lua|yaml))(?::[0-9]+)?`")
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range pathRe.FindAllStringSubmatch(codeRe.ReplaceAllString(string(b), ""), -1) {
			path := m[1]
			if strings.HasPrefix(path, "/") || strings.Contains(path, "://") || strings.ContainsAny(path, "<>*") {
				continue
			}
			if _, err := os.Stat(path); err == nil {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), path)); err == nil {
				continue
			}
			t.Errorf("%s cites %s, which does not exist", doc, path)
		}
	}
}

// The README is what a user reads first and BENCHMARKS one page of today's figures: each stays
// within its length, so that reference that does not fit goes to docs/.
func TestDocsFitTheirLength(t *testing.T) {
	for _, d := range []struct {
		path     string
		maxLines int
	}{{"README.md", 450}, {"docs/BENCHMARKS.md", 250}} {
		b, err := os.ReadFile(d.path)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > d.maxLines {
			t.Errorf("%s has %d lines; at most %d", d.path, n, d.maxLines)
		}
	}
}
