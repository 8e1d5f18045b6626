package envoycheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/confchange"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// changesOf writes two configurations and returns Changes from the first to the second.
func changesOf(t *testing.T, name, old, cur string) ([]confchange.RuleChange, *Report) {
	t.Helper()
	dir := t.TempDir()
	o, n := filepath.Join(dir, "old-"+name), filepath.Join(dir, "new-"+name)
	if err := os.WriteFile(o, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n, []byte(cur), 0o644); err != nil {
		t.Fatal(err)
	}
	return Changes(o, n)
}

// kinds renders each rule's change as "name=kind".
func kinds(changes []confchange.RuleChange) string {
	var s []string
	for _, c := range changes {
		s = append(s, c.Rule+"="+string(c.Kind))
	}
	return strings.Join(s, " ")
}

// The kinds wasmhost/moduletest's TestCheckPreviousMatchesTheModule does not run through the
// module: rules added and removed, a rename among them, the key part default and on_duplicate,
// adaptive rules, domain and key_prefix across local and global rules, vm_id and listeners in
// bootstraps.
func TestChanges(t *testing.T) {
	rule := func(name, extra string) string {
		return `{"name":"` + name + `","key":[{"source":"header","name":"x-k"` + extra + `}],"algorithm":"gcra","limit":3,"window":"1h","continue":true}`
	}
	for _, c := range []struct {
		name, old, cur, want string
		warnings             int
	}{
		{"added, removed and renamed",
			`{"rules":[` + rule("a", "") + `,` + rule("b", `,"default":"x"`) + `]}`,
			`{"rules":[` + rule("a", "") + `,` + rule("c", `,"on_duplicate":"first"`) + `,` + rule("b2", `,"default":"x"`) + `]}`,
			"a=kept c=new b2=reset b=removed", 1},
		{"default and on_duplicate",
			`{"rules":[` + rule("a", `,"default":"x"`) + `,` + rule("b", "") + `]}`,
			`{"rules":[` + rule("a", `,"default":"y"`) + `,` + rule("b", `,"on_duplicate":"last"`) + `]}`,
			"a=reset b=kept", 1},
		{"adaptive: the controller's limits are its own, the window is the state's",
			`{"rules":[{"name":"a","algorithm":"adaptive","limit":50,"window":"1s","adaptive":{"min_limit":10,"max_limit":100},"continue":true},{"name":"b","algorithm":"adaptive","limit":50,"window":"1s","adaptive":{"min_limit":10,"max_limit":100}}]}`,
			`{"rules":[{"name":"a","algorithm":"adaptive","limit":60,"window":"1s","adaptive":{"min_limit":20,"max_limit":200},"continue":true},{"name":"b","algorithm":"adaptive","limit":50,"window":"2s","adaptive":{"min_limit":10,"max_limit":100}}]}`,
			"a=kept b=converted without grant", 0},
		{"domain resets local and global rules, key_prefix global ones",
			`{"redis":{"cluster":"w"},"rules":[` + rule("l", "") + `,{"name":"g","scope":"global","algorithm":"gcra","limit":3,"window":"1h"}]}`,
			`{"domain":"other","redis":{"cluster":"w"},"rules":[` + rule("l", "") + `,{"name":"g","scope":"global","algorithm":"gcra","limit":3,"window":"1h"}]}`,
			"l=reset g=reset", 2},
		{"key_prefix",
			`{"redis":{"cluster":"w"},"rules":[` + rule("l", "") + `,{"name":"g","scope":"global","algorithm":"gcra","limit":3,"window":"1h"}]}`,
			`{"redis":{"cluster":"w","key_prefix":"x"},"rules":[` + rule("l", "") + `,{"name":"g","scope":"global","algorithm":"gcra","limit":3,"window":"1h"}]}`,
			"l=kept g=reset", 1},
		{"override prefix respelt, override removed",
			`{"rules":[{"name":"a","key":[{"source":"header","name":"x-k"}],"algorithm":"gcra","limit":10,"window":"1h","overrides":[{"prefix":"free-","limit":5},{"exact":"vip","limit":50}]}]}`,
			`{"rules":[{"name":"a","key":[{"source":"header","name":"x-k"}],"algorithm":"gcra","limit":10,"window":"1h","overrides":[{"prefix":"free","limit":5}]}]}`,
			"a=converted without grant", 0},
		{"override with the rule's parameters added, unlimited override added",
			`{"rules":[{"name":"a","key":[{"source":"header","name":"x-k"}],"algorithm":"gcra","limit":10,"window":"1h"}]}`,
			`{"rules":[{"name":"a","key":[{"source":"header","name":"x-k"}],"algorithm":"gcra","limit":10,"window":"1h","overrides":[{"exact":"x","limit":10},{"exact":"y","unlimited":true}]}]}`,
			"a=kept", 0},
		{"unlimited override limited again",
			`{"rules":[{"name":"a","key":[{"source":"header","name":"x-k"}],"algorithm":"gcra","limit":10,"window":"1h","overrides":[{"exact":"y","unlimited":true}]}]}`,
			`{"rules":[{"name":"a","key":[{"source":"header","name":"x-k"}],"algorithm":"gcra","limit":10,"window":"1h","overrides":[{"exact":"y","limit":10}]}]}`,
			"a=converted without grant", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			changes, rep := changesOf(t, "plugin.json", c.old, c.cur)
			if !rep.OK() {
				t.Fatalf("errors: %q", rep.Errors)
			}
			if got := kinds(changes); got != c.want {
				t.Errorf("changes %s, want %s\n%v", got, c.want, changes)
			}
			if len(rep.Warnings) != c.warnings {
				t.Errorf("%d warnings, want one per reset (%d): %q", len(rep.Warnings), c.warnings, rep.Warnings)
			}
		})
	}

	// Bootstraps: listeners pair by name; a vm_id change resets the local rules (another
	// shared-data namespace) and keeps the global ones.
	two := func(vmID string) string {
		b := bootstrap(`{"redis":{"cluster":"upstream"},"rules":[{"name":"l","algorithm":"gcra","limit":3,"window":"1h","continue":true},
			{"name":"g","scope":"global","algorithm":"gcra","limit":3,"window":"1h"}]}`, normalised)
		return strings.Replace(b, "vm_id: ratelimit", "vm_id: "+vmID, 1)
	}
	changes, rep := changesOf(t, "envoy.yaml", two("ratelimit"), two("other"))
	if got := kinds(changes); got != "l=reset g=kept" || len(rep.Warnings) != 1 {
		t.Errorf("vm_id: %s, warnings %q", got, rep.Warnings)
	}
	if !strings.HasPrefix(changes[0].String(), `listener "main", plugin "ratelimit": rule "l": reset (vm_id "ratelimit" -> "other"`) {
		t.Errorf("%s", changes[0])
	}
	renamed := strings.Replace(two("ratelimit"), "- name: main\n    address", "- name: other\n    address", 1)
	changes, _ = changesOf(t, "envoy.yaml", two("ratelimit"), renamed)
	if got := kinds(changes); got != "l=kept g=kept" {
		t.Errorf("one filter configuration on each side pairs whatever the listener's name: %s", got)
	}
	// A file that cannot be compared is an error.
	if _, rep := changesOf(t, "plugin.json", `{"rules":[{"name":"a","limt":1}]}`, `{"rules":[`+rule("a", "")+`]}`); rep.OK() {
		t.Error("an old configuration the filter refuses was compared")
	}
}

// What a client_ip key part reads is the configuration's trusted_hops (which hop of
// X-Forwarded-For) and, in a bootstrap, how the connection manager derives the client address
// it reports as source.address (use_remote_address, xff_num_trusted_hops): changing any of them
// makes every client_ip key read another address, so those rules' clients start afresh; rules
// keyed otherwise keep their state.
func TestChangesOfClientAddress(t *testing.T) {
	rules := `"rules":[
		{"name":"ip","continue":true,"key":[{"source":"client_ip","ipv6_prefix":64}],"algorithm":"fixed_window","limit":10,"window":"1m"},
		{"name":"ip-and-user","continue":true,"key":[{"source":"header","name":"x-user"},{"source":"client_ip","ipv6_prefix":64}],"algorithm":"fixed_window","limit":10,"window":"1m"},
		{"name":"user","key":[{"source":"header","name":"x-user"}],"algorithm":"fixed_window","limit":10,"window":"1m"}]`
	changes, rep := changesOf(t, "plugin.json", `{`+rules+`}`, `{"trusted_hops":2,`+rules+`}`)
	if got := kinds(changes); got != "ip=reset ip-and-user=reset user=kept" || len(rep.Warnings) != 2 {
		t.Fatalf("trusted_hops 0 -> 2: %s, warnings %q", got, rep.Warnings)
	}
	if want := `rule "ip": reset (trusted_hops 0 -> 2: client_ip reads another hop of X-Forwarded-For, so clients count under another address)`; changes[0].String() != want {
		t.Errorf("%s\nwant %s", changes[0], want)
	}
	changes, _ = changesOf(t, "plugin.json", `{"trusted_hops":1,`+rules+`}`, `{"trusted_hops":1,`+rules+`}`)
	if got := kinds(changes); got != "ip=kept ip-and-user=kept user=kept" {
		t.Errorf("trusted_hops unchanged: %s", got)
	}

	hcm := func(settings string) string {
		return bootstrap(`{`+rules+`}`, normalised+settings)
	}
	for _, c := range []struct{ name, old, cur, why string }{
		{"use_remote_address", "", "\n          use_remote_address: true",
			"use_remote_address false -> true: Envoy derives the client address (source.address, X-Forwarded-For) that client_ip reads otherwise"},
		{"xff_num_trusted_hops", "\n          use_remote_address: true", "\n          use_remote_address: true\n          xff_num_trusted_hops: 1",
			"xff_num_trusted_hops 0 -> 1: Envoy derives the client address (source.address, X-Forwarded-For) that client_ip reads otherwise"},
	} {
		changes, rep := changesOf(t, "envoy.yaml", hcm(c.old), hcm(c.cur))
		if !rep.OK() {
			t.Fatalf("%s: errors %q", c.name, rep.Errors)
		}
		if got := kinds(changes); got != "ip=reset ip-and-user=reset user=kept" || len(rep.Warnings) != 2 {
			t.Errorf("%s: %s, warnings %q", c.name, got, rep.Warnings)
		} else if !strings.Contains(changes[0].String(), c.why) {
			t.Errorf("%s: %s\nwant the reason %q", c.name, changes[0], c.why)
		}
	}
}

// skip_xff_append only stops Envoy appending the peer to X-Forwarded-For (which it does only
// under use_remote_address); the client address Envoy reports as source.address is derived
// before that. It changes what a client_ip part reads only when the part reads
// X-Forwarded-For (trusted_hops > 0) and use_remote_address is on.
func TestChangesOfSkipXFFAppend(t *testing.T) {
	const skip = "\n          skip_xff_append: true"
	const remote = "\n          use_remote_address: true"
	rules := func(hops string) string {
		return `{` + hops + `"rules":[
		{"name":"ip","continue":true,"key":[{"source":"client_ip","ipv6_prefix":64}],"algorithm":"fixed_window","limit":10,"window":"1m"},
		{"name":"user","key":[{"source":"header","name":"x-user"}],"algorithm":"fixed_window","limit":10,"window":"1m"}]}`
	}
	for _, c := range []struct{ name, hops, hcm, want string }{
		{"trusted_hops 0", "", remote, "ip=kept user=kept"},
		{"trusted_hops 1 without use_remote_address", `"trusted_hops":1,`, "", "ip=kept user=kept"},
		{"trusted_hops 1 with use_remote_address", `"trusted_hops":1,`, remote, "ip=reset user=kept"},
	} {
		changes, rep := changesOf(t, "envoy.yaml", bootstrap(rules(c.hops), normalised+c.hcm), bootstrap(rules(c.hops), normalised+c.hcm+skip))
		if !rep.OK() {
			t.Fatalf("%s: errors %q", c.name, rep.Errors)
		}
		const why = "skip_xff_append false -> true: decides whether Envoy appends the peer to the X-Forwarded-For that client_ip reads with trusted_hops > 0"
		reset := c.want != "ip=kept user=kept"
		if got := kinds(changes); got != c.want {
			t.Errorf("%s: %s, want %s; warnings %q", c.name, got, c.want, rep.Warnings)
		} else if !reset && len(rep.Warnings) != 0 {
			t.Errorf("%s: warnings %q", c.name, rep.Warnings)
		} else if reset && !strings.Contains(changes[0].String(), why) {
			t.Errorf("%s: %s\nwant the reason %q", c.name, changes[0], why)
		}
	}

	// The shipped envoy.yaml's client_ip rules read source.address: skip_xff_append keeps them.
	shipped, err := os.ReadFile(repoFile("envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(shipped), `"trusted_hops"`) {
		t.Fatal("envoy.yaml sets trusted_hops; this test expects its client_ip parts to read source.address")
	}
	const line = "          merge_slashes: true\n"
	if !strings.Contains(string(shipped), line) {
		t.Fatal("envoy.yaml no longer has " + line)
	}
	skipped := strings.Replace(string(shipped), line, line+"          skip_xff_append: true\n", 1)
	changes, rep := changesOf(t, "envoy.yaml", string(shipped), skipped)
	if !rep.OK() || len(rep.Warnings) != 0 {
		t.Errorf("shipped envoy.yaml with skip_xff_append: %+v", rep)
	}
	for _, c := range changes {
		if c.Kind != confchange.ChangeKept {
			t.Errorf("shipped envoy.yaml with skip_xff_append: %s", c)
		}
	}
}

// check -previous prints each rule's change, a warning on each reset (which -strict fails),
// and make check PREVIOUS=... passes it on.
func TestCheckPreviousCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	dir := t.TempDir()
	shipped, err := os.ReadFile(repoFile("envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	flipped := strings.Replace(string(shipped), `"scope": "global"`, `"scope": "local"`, 1)
	if flipped == string(shipped) {
		t.Fatal("envoy.yaml no longer has the global rule this test flips")
	}
	newPath := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(newPath, []byte(flipped), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := wasmtest.BuildCommand(t, "./wasmhost/cmd/ratelimit-host")
	out, err := exec.Command(bin, "check", "-previous", repoFile("envoy.yaml"), newPath).CombinedOutput()
	if err != nil {
		t.Fatalf("check -previous: %v\n%s", err, out)
	}
	for _, want := range []string{
		`change: listener "ingress", plugin "ratelimit": rule "login-per-ip": kept`,
		`change: listener "ingress", plugin "ratelimit": rule "global-per-key": reset (scope global -> local`,
		`warning: listener "ingress", plugin "ratelimit": rule "global-per-key": reset`,
		`ok (1 warning)`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command(bin, "check", "-strict", "-previous", repoFile("envoy.yaml"), newPath).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("check -strict -previous with a reset: %v, want exit status 1\n%s", err, out)
	}
	out, err = exec.Command("make", "-s", "-C", repoFile("."), "check", "PREVIOUS=envoy.yaml", "ENVOY="+newPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `rule "global-per-key": reset`) {
		t.Fatalf("make check PREVIOUS=...: %v\n%s", err, out)
	}
}
