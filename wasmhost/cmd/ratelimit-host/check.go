package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/effective"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoycheck"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
)

// checkUsage is the check subcommand's help.
const checkUsage = `usage: ratelimit-host check [-strict] [-effective] [-previous OLD] envoy.yaml|plugin.json...

Checks each Envoy bootstrap before a deploy: Envoy's API rules, every filter configuration,
route and virtual-host names in rules against the listener's routes, and warnings for rules
that can never apply, rules selected or keyed by the path (or by routes chosen by it) where
Envoy does not normalise paths, per-IP keys without an IPv6 prefix and shadow rules whose
headers reach clients. An error inside a filter configuration is
reported at the bootstrap's line and column. A plugin configuration alone (the JSON file that
-config serves: an object with "rules") is checked too, without the names of routes, virtual
hosts and the redis cluster, which only a bootstrap defines.

With -previous OLD (a bootstrap or a plugin configuration, the one deployed now), it also says
what deploying each file instead does to every rule's live state: kept, converted without
grant (each client keeps what it used, at most the new capacity), reset (its clients start
afresh with their whole allowance: a warning), new or removed. docs/config-changes.md has the
table of what causes each.

With -effective it prints, for each file that is fine, every filter configuration's effective
configuration: the JSON of what the filter enforces, every default filled in.

Exit status: 0 when every file is fine (warnings are printed), 1 when any file has an error
(or, with -strict, a warning), 2 on a usage error. (make check exits 2 on any failure: make's
own status; its last line, "Error 1", is this command's.)
`

// runCheck is the check subcommand; it returns the process's exit status.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	strict := fs.Bool("strict", false, "treat warnings as errors")
	previous := fs.String("previous", "", "the configuration deployed now: say what each file does to its rules' state")
	showEffective := fs.Bool("effective", false, "print each filter configuration's effective configuration")
	fs.Usage = func() { fmt.Fprint(stderr, checkUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	status := 0
	for _, path := range fs.Args() {
		rep := envoycheck.File(path)
		if *previous != "" && rep.OK() {
			changes, crep := envoycheck.Changes(*previous, path)
			for _, c := range changes {
				fmt.Fprintf(stdout, "%s: change: %s\n", path, c)
			}
			rep.Errors = append(rep.Errors, crep.Errors...)
			rep.Warnings = append(rep.Warnings, crep.Warnings...)
		}
		for _, e := range rep.Errors {
			fmt.Fprintf(stdout, "%s: error: %s\n", path, e)
		}
		for _, w := range rep.Warnings {
			fmt.Fprintf(stdout, "%s: warning: %s\n", path, w)
		}
		switch {
		case !rep.OK() || (*strict && len(rep.Warnings) > 0):
			fmt.Fprintf(stdout, "%s: FAILED (%s, %s)\n", path, count(len(rep.Errors), "error"), count(len(rep.Warnings), "warning"))
			status = 1
		case rep.Plugin:
			fmt.Fprintf(stdout, "%s: ok (%s; a plugin configuration alone: route, virtual-host and cluster names not checked)\n",
				path, count(len(rep.Warnings), "warning"))
		default:
			fmt.Fprintf(stdout, "%s: ok (%s)\n", path, count(len(rep.Warnings), "warning"))
		}
		if *showEffective && rep.OK() {
			printEffective(stdout, path)
		}
	}
	return status
}

// printEffective prints the effective configuration of the plugin configuration at path, or
// of each listener's filter configuration in the bootstrap at path (which the check read).
func printEffective(w io.Writer, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	configs := map[string][]byte{"": data}
	if !envoycheck.IsPluginConfig(data, path) {
		c, err := envoyconf.Parse(data)
		if err != nil {
			return
		}
		configs = map[string][]byte{}
		for _, l := range c.Listeners {
			if l.Filter != nil {
				configs[" listener "+l.Name+":"] = l.Filter.PluginConfig
			}
		}
	}
	for _, where := range slices.Sorted(maps.Keys(configs)) {
		if c, err := config.Parse(configs[where]); err == nil {
			if b, err := effective.JSON(c); err == nil {
				fmt.Fprintf(w, "%s:%s effective configuration: %s\n", path, where, b)
			}
		}
	}
}

// runRoutes is the routes subcommand: it prints each listener's routes with the rules that can
// apply to them (envoycheck.Describe), for the banner of `make run`.
func runRoutes(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: ratelimit-host routes envoy.yaml")
		return 2
	}
	c, err := envoyconf.Load(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "ratelimit-host:", err)
		return 1
	}
	fmt.Fprint(stdout, envoycheck.Describe(c))
	return 0
}

// count is "1 error", "2 errors", "0 warnings".
func count(n int, noun string) string {
	if n != 1 {
		noun += "s"
	}
	return strconv.Itoa(n) + " " + noun
}
