package redis_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// scriptCommands returns the Redis commands the scripts call (redis.call or redis.pcall with
// the command's name as a string literal), lower-case, sorted and without repeats, read from
// the Lua files every script is assembled from (gen_lua.go, TestLuaGoIsGenerated). A call
// whose command is not a literal would escape every list made from these names, so it fails
// the test.
func scriptCommands(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob("lua/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("lua/*.lua: %v, %d files", err, len(files))
	}
	callRe := regexp.MustCompile(`redis\.p?call\b`)
	literalRe := regexp.MustCompile(`^redis\.p?call\(\s*(?:'([A-Za-z]+)'|"([A-Za-z]+)")`)
	seen := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			// The scripts put no "--" in a string, so a comment runs from there to the end.
			if c := strings.Index(line, "--"); c >= 0 {
				line = line[:c]
			}
			for _, at := range callRe.FindAllStringIndex(line, -1) {
				m := literalRe.FindStringSubmatch(line[at[0]:])
				if m == nil {
					t.Errorf("%s:%d: a call whose command is not a string literal: %s", f, i+1, strings.TrimSpace(line))
					continue
				}
				seen[strings.ToLower(m[1]+m[2])] = true
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no redis.call or redis.pcall found in lua/*.lua")
	}
	cmds := make([]string, 0, len(seen))
	for c := range seen {
		cmds = append(cmds, c)
	}
	slices.Sort(cmds)
	return cmds
}

// aclCommands returns the commands an ACL rule list allows one by one (its "+<command>"
// fields), lower-case and sorted, repeats kept; a quoted field (as on a shell command line)
// counts without its quotes. It fails the test when the list does not start from -@all (or
// its alias nocommands) before every "+" field: Redis applies the rules in order, so a -@all
// after "+get" takes GET away again, and without any -@all the user keeps what it had.
func aclCommands(t *testing.T, where, acl string) []string {
	t.Helper()
	var cmds []string
	denyAll := false
	for _, f := range strings.Fields(acl) {
		f = strings.Trim(f, `'"`)
		switch {
		case f == "-@all" || f == "nocommands":
			if denyAll && len(cmds) > 0 {
				t.Errorf("%s: another %s comes after %q, which it takes away: %q", where, f, cmds, acl)
			}
			denyAll = true
		case strings.HasPrefix(f, "+"):
			if !denyAll {
				t.Errorf("%s: %s comes before any -@all: %q", where, f, acl)
			}
			cmds = append(cmds, strings.ToLower(f[1:]))
		}
	}
	if !denyAll {
		t.Errorf("%s: the ACL has no -@all: %q", where, acl)
	}
	slices.Sort(cmds)
	return cmds
}

// TestACLAllowsExactlyTheScriptsCommands checks every place that spells out the least-privilege
// Redis user against the commands the scripts call: the ACL TestLeastPrivilege runs under, the
// README's redis-server command line, and docs/global-limits.md's redis.conf line and its list
// of commands. Each must allow those commands and EVALSHA and EVAL, and nothing more: a command
// missing fails a feature for whoever follows the documentation (Redis refuses the script's
// call), and one too many is a privilege nobody needs.
func TestACLAllowsExactlyTheScriptsCommands(t *testing.T) {
	want := append(scriptCommands(t), "eval", "evalsha")
	slices.Sort(want)
	check := func(where string, got []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			var missing, extra []string
			for _, c := range want {
				if !slices.Contains(got, c) {
					missing = append(missing, c)
				}
			}
			for i, c := range got {
				if !slices.Contains(want, c) || i > 0 && got[i-1] == c {
					extra = append(extra, c)
				}
			}
			t.Errorf("%s names %q\nwant %q (the scripts' commands, eval and evalsha)\nmissing %q, extra or repeated %q",
				where, got, want, missing, extra)
		}
	}

	check("leastPrivilege (integration_test.go)", aclCommands(t, "leastPrivilege", leastPrivilege))

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The README's redis-server command line, continued over lines ending in '\'.
	serverRe := regexp.MustCompile(`(?m)^redis-server (?:.*\\\n)*.*$`)
	lines := serverRe.FindAllString(string(readme), -1)
	if len(lines) != 1 {
		t.Fatalf("README.md: %d redis-server command lines, want 1", len(lines))
	}
	check("README.md's redis-server line", aclCommands(t, "README.md", strings.ReplaceAll(lines[0], "\\\n", " ")))

	doc, err := os.ReadFile("../../docs/global-limits.md")
	if err != nil {
		t.Fatal(err)
	}
	userRe := regexp.MustCompile(`(?m)^user default .*$`)
	lines = userRe.FindAllString(string(doc), -1)
	if len(lines) != 1 {
		t.Fatalf("docs/global-limits.md: %d redis.conf user lines, want 1", len(lines))
	}
	check("docs/global-limits.md's redis.conf line", aclCommands(t, "docs/global-limits.md", lines[0]))

	// The paragraph that lists the commands in prose, from "The filter sends only" to the blank
	// line: its commands are the upper-case words in backquotes.
	start := strings.Index(string(doc), "The filter sends only")
	if start < 0 {
		t.Fatal(`docs/global-limits.md: no paragraph starts "The filter sends only"`)
	}
	para, _, _ := strings.Cut(string(doc[start:]), "\n\n")
	var prose []string
	for _, m := range regexp.MustCompile("`([A-Z]+)`").FindAllStringSubmatch(para, -1) {
		if c := strings.ToLower(m[1]); !slices.Contains(prose, c) {
			prose = append(prose, c)
		}
	}
	slices.Sort(prose)
	check("docs/global-limits.md's list of commands", prose)
}
