package regexp

import (
	"math/rand/v2"
	stdregexp "regexp"
	stdsyntax "regexp/syntax"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/regexp/syntax"
)

// standardSeeds are patterns whose classes come from the generated \p{Name} lookup, with and
// without case folding, next to ordinary ones.
var standardSeeds = []string{
	`\p{Greek}`, `\pL`, `\PL`, `\p{^Greek}`, `\P{^Greek}`, `(?i)\p{Greek}`, `(?i)\P{Greek}`,
	`(?i)\p{Lu}`, `(?i)\p{Ll}+`, `(?i)\p{Lt}`, `(?i)[^\p{Lu}]`, `(?i)\pM`, `(?i)\p{Mn}`,
	`\p{Cased_Letter}`, `\p{cased letter}`, `\p{LC}`, `(?i)\p{Lc}`, `\p{Common}`, `(?i)\p{Common}`,
	`(?i)\p{Inherited}`, `\p{Han}+`, `\p{Any}`, `\p{Assigned}`, `(?i)\p{ASCII}`, `\p{Letter}`,
	`\p{Old_Italic}`, `\p{Foo}`, `\p{`, `\pZ`, `[\p{Nd}\p{Greek}]+`, `[^\pN\p{Latin}]`,
	`(?i)k`, `(?i)[k-s]`, `(?i)ſ`, `(?i)σ+`, `a{2,5}b*?`, `^(\w+)@(\d+)$`, `(?P<n>x)|y`,
	`(?i:[α-ω])\b`, `[[:alpha:]\pP]`, `x{1001}`, `(`, `a**`, `\Q.*\E`, `[z-a]`,
}

// standardInputs mix Latin, Greek (with final sigma), the Kelvin sign and long s (which fold
// to ASCII letters), Han, digits, marks and invalid UTF-8.
var standardInputs = []string{
	"", "abc", "ABC Kk\u212a ſs", "Σίσυφος σς ΣΣ", "ǅǆǄ ᾈᾀ", "漢字 かな", "x1234 ٣٤",
	"e\u0301 \u0345", "\xff\xfeA", "user@42", "a.*b", "\U00010300\U0001D400",
}

// TestAsStandardRegexp compares this copy with the standard regexp on the seeds and on standardRandomPatterns
// random patterns built from the same pieces (up to two nested groups), each against every
// input (see checkAsStandard).
func TestAsStandardRegexp(t *testing.T) {
	for _, p := range standardSeeds {
		checkAsStandard(t, p, standardInputs...)
	}
	rng := rand.New(rand.NewPCG(14, 1))
	for range standardRandomPatterns {
		checkAsStandard(t, randomPattern(rng, 2), standardInputs...)
	}
}

// FuzzAsStandardRegexp compares this copy with the standard regexp on any pattern and input.
func FuzzAsStandardRegexp(f *testing.F) {
	for i, p := range standardSeeds {
		f.Add(p, standardInputs[i%len(standardInputs)])
	}
	f.Fuzz(func(t *testing.T, pattern, input string) { checkAsStandard(t, pattern, input) })
}

// checkAsStandard requires the same compile error, the same parsed and simplified tree, the
// same program, and the same matches on each input (leftmost-first and leftmost-longest) from
// this copy as from the standard library.
func checkAsStandard(t *testing.T, pattern string, inputs ...string) {
	re, err := Compile(pattern)
	want, werr := stdregexp.Compile(pattern)
	if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
		t.Fatalf("Compile(%q): %v, the standard regexp: %v", pattern, err, werr)
	}
	if err != nil {
		return
	}
	tree, err := syntax.Parse(pattern, syntax.Perl)
	wtree, werr := stdsyntax.Parse(pattern, stdsyntax.Perl)
	if err != nil || werr != nil {
		t.Fatalf("Parse(%q): %v, %v after a successful Compile", pattern, err, werr)
	}
	if got, w := tree.String(), wtree.String(); got != w {
		t.Fatalf("Parse(%q) = %s, the standard regexp/syntax: %s", pattern, got, w)
	}
	prog, err := syntax.Compile(tree.Simplify())
	wprog, werr := stdsyntax.Compile(wtree.Simplify())
	if err != nil || werr != nil {
		t.Fatalf("syntax.Compile(%q): %v, %v", pattern, err, werr)
	}
	if got, w := prog.String(), wprog.String(); got != w {
		t.Fatalf("syntax.Compile(%q):\n%s\nthe standard regexp/syntax:\n%s", pattern, got, w)
	}
	if re.String() != want.String() || re.NumSubexp() != want.NumSubexp() ||
		!slices.Equal(re.SubexpNames(), want.SubexpNames()) {
		t.Fatalf("%q: String, NumSubexp or SubexpNames differ from the standard regexp", pattern)
	}
	for longest := range 2 {
		if longest == 1 {
			re.Longest()
			want.Longest()
		}
		for _, input := range inputs {
			if got, w := re.MatchString(input), want.MatchString(input); got != w {
				t.Fatalf("%q longest=%d MatchString(%q) = %v, the standard regexp: %v", pattern, longest, input, got, w)
			}
			got := re.FindAllStringSubmatchIndex(input, -1)
			w := want.FindAllStringSubmatchIndex(input, -1)
			if !slices.EqualFunc(got, w, slices.Equal) {
				t.Fatalf("%q longest=%d FindAllStringSubmatchIndex(%q) = %v, the standard regexp: %v", pattern, longest, input, got, w)
			}
		}
	}
}

// patternPieces are the atoms of randomPattern: \p{Name} classes (the part this copy
// changed), literals whose case folds are special, classes, anchors and escapes.
var patternPieces = []string{
	`\p{Greek}`, `\pL`, `\PL`, `\p{Lu}`, `\p{Ll}`, `\p{Lt}`, `\pM`, `\p{Mn}`, `\pN`, `\p{Nd}`,
	`\p{Han}`, `\p{Latin}`, `\p{Common}`, `\p{Inherited}`, `\p{Cased_Letter}`, `\p{LC}`,
	`\p{^Greek}`, `\P{Lu}`, `\p{Any}`, `\p{Assigned}`, `\p{ASCII}`, `\p{Letter}`, `\p{Zs}`,
	`\pP`, `\p{Cyrillic}`, `\p{Nope}`, `a`, `k`, `s`, `K`, `σ`, `Σ`, `ς`, `ǅ`, `\x{212a}`,
	`ſ`, `.`, `\d`, `\w`, `\s`, `\b`, `^`, `$`, `[a-z]`, `[^\d]`, `[[:upper:]]`, `\\`, `@`,
}

// randomPattern builds a pattern of up to 4 terms, each a piece, a class of pieces, or a
// group of a smaller pattern, with random repetition, alternation and flags ((?i), (?s), (?U)).
func randomPattern(rng *rand.Rand, depth int) string {
	var b strings.Builder
	if rng.IntN(3) == 0 {
		b.WriteString([]string{"(?i)", "(?s)", "(?U)", "(?i-s)", "(?is)"}[rng.IntN(5)])
	}
	for n := 1 + rng.IntN(4); n > 0; n-- {
		switch k := rng.IntN(10); {
		case k < 5 || depth == 0:
			b.WriteString(patternPieces[rng.IntN(len(patternPieces))])
		case k < 8:
			b.WriteString("[")
			if rng.IntN(3) == 0 {
				b.WriteString("^")
			}
			for m := 1 + rng.IntN(3); m > 0; m-- {
				piece := patternPieces[rng.IntN(len(patternPieces))]
				if piece == "." || piece == `\b` || piece == "^" || piece == "$" {
					piece = "x"
				}
				b.WriteString(piece)
			}
			b.WriteString("]")
		default:
			b.WriteString([]string{"(", "(?:", "(?i:", "(?P<g>"}[rng.IntN(4)])
			b.WriteString(randomPattern(rng, depth-1))
			b.WriteString(")")
		}
		b.WriteString([]string{"", "", "", "*", "+", "?", "{2}", "{1,3}", "*?", "|"}[rng.IntN(10)])
	}
	return b.String()
}

// standardRandomPatterns is how many random patterns TestAsStandardRegexp compares.
const standardRandomPatterns = 1500
