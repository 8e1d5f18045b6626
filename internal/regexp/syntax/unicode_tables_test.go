// goUnicodeTable below is copied from Go's regexp/syntax/parse.go (Go's licence is in
// ../LICENSE).

package syntax

import (
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode"
)

// goUnicodeTable is Go 1.26's unicodeTable (regexp/syntax/parse.go) as it was, reading
// package unicode's maps: the reference the generated switch must equal.
func goUnicodeTable(name string) (tab, fold *unicode.RangeTable, sign int) {
	name = canonicalName(name)
	switch name {
	case "Any":
		return anyTable, anyTable, +1
	case "Assigned":
		return unicode.Cn, unicode.Cn, -1
	case "Ascii":
		return asciiTable, asciiFoldTable, +1
	case "Lc":
		return unicode.Categories["LC"], unicode.FoldCategory["LC"], +1
	}
	if t := unicode.Categories[name]; t != nil {
		return t, unicode.FoldCategory[name], +1
	}
	if t := unicode.Scripts[name]; t != nil {
		return t, unicode.FoldScript[name], +1
	}
	goAliasesOnce.Do(func() {
		goAliases = map[string]string{}
		for a, actual := range unicode.CategoryAliases {
			goAliases[canonicalName(a)] = actual
		}
	})
	if actual := goAliases[name]; actual != "" {
		return unicode.Categories[actual], unicode.FoldCategory[actual], +1
	}
	return nil, nil, 0
}

var (
	goAliasesOnce sync.Once
	goAliases     map[string]string
)

// TestUnicodeTableAsMaps checks that every name a \p{...} class can spell gives the tables
// Go's map lookups give: the same *unicode.RangeTable (package unicode's own), a fold table
// with the same ranges, the same sign. The names are every key of the maps, every alias,
// their canonical forms, the spellings canonicalName folds (case, '_', '-', ' '), the special
// cases and names no map holds. It fails when unicode_tables.go is stale (a Go upgrade with
// new Unicode tables: run go generate).
func TestUnicodeTableAsMaps(t *testing.T) {
	if unicodeVersion != unicode.Version {
		t.Fatalf("unicode_tables.go was generated from Unicode %s, package unicode is %s: run go generate", unicodeVersion, unicode.Version)
	}
	names := []string{"Any", "any", "ANY", "Assigned", "assigned", "ASCII", "Ascii", "ascii",
		"LC", "Lc", "lc", "L&", "", "^", "Foo", "Greek ", " Greek", "Gr_eek", "Old_Italic",
		"Olditalic", "old italic", "OldItalic", "Cased_Letter", "cased-letter", "casedletter",
		"Letter", "letter", "L", "l", "Lu", "lu", "LU", "Han", "han", "HAN", "Latin", "Braille",
		"Zzzz", "Nko", "NKo", "Phags_Pa", "Phagspa"}
	var maps []string
	for k := range unicode.Categories {
		maps = append(maps, k)
	}
	for k := range unicode.Scripts {
		maps = append(maps, k)
	}
	for k := range unicode.CategoryAliases {
		maps = append(maps, k)
	}
	for k := range unicode.Properties { // not classes in Go's syntax: must stay unknown
		maps = append(maps, k)
	}
	for _, k := range maps {
		names = append(names, k, canonicalName(k), strings.ToLower(k), strings.ToUpper(k),
			strings.ReplaceAll(k, "_", ""), strings.ReplaceAll(k, "_", "-"), strings.ReplaceAll(k, "_", " "),
			k+"x", k[:len(k)-1])
	}
	known := 0
	for _, n := range names {
		tab, fold, sign := unicodeTable(n)
		wtab, wfold, wsign := goUnicodeTable(n)
		if tab != wtab || sign != wsign {
			t.Errorf("unicodeTable(%q): table %p sign %d, Go's maps give %p sign %d", n, tab, sign, wtab, wsign)
		}
		if (fold == nil) != (wfold == nil) || fold != nil && !reflect.DeepEqual(*fold, *wfold) {
			t.Errorf("unicodeTable(%q): fold table %v, Go's maps give %v", n, fold, wfold)
		}
		if tab != nil {
			known++
		}
	}
	// A guard against a test that compares nothing: most names above are known ones.
	if known < len(unicode.Categories)+len(unicode.Scripts) {
		t.Errorf("only %d of %d names known", known, len(names))
	}
}
