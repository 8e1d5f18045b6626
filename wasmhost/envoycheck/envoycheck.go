// Package envoycheck checks an Envoy bootstrap that loads the rate-limit filter before it is
// deployed: what `make check ENVOY=path` and `ratelimit-host check` run.
//
// It validates the bootstrap with Envoy's API rules (package envoyconf: the protos'
// validation rules, as Envoy applies them when it loads the file), parses every listener's
// filter configuration with the filter's own parser (package config, the code the .wasm
// runs), and cross-checks the two: a rule that names a route or a virtual host the listener
// does not have would never apply, so it is an error, not a warning (a typo such as
// "public_api" for "public-api" would otherwise silently turn the limit off). It warns about
// configurations that are valid but probably not what was meant: rules that can never apply,
// rules selected or keyed by the path (or by routes chosen by it) on a listener that lets
// one path be spelt several ways, per-IP keys without an IPv6 prefix, and shadow rules whose
// headers reach clients.
package envoycheck

import (
	"fmt"
	"os"
	"regexp/syntax"
	"sort"
	"strconv"
	"strings"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
	"go.yaml.in/yaml/v3"
)

// Report is the outcome of a check. A configuration with errors must not be deployed;
// warnings describe valid configurations that probably do not do what was meant.
type Report struct {
	Errors   []string
	Warnings []string
	// Plugin is set when the file was a plugin configuration alone, not a bootstrap: the
	// route and virtual-host names its rules select, and its redis cluster, were not checked.
	Plugin bool
}

// OK reports whether the check found no errors (warnings allowed).
func (r *Report) OK() bool { return len(r.Errors) == 0 }

func (r *Report) errorf(format string, args ...any) {
	r.Errors = append(r.Errors, fmt.Sprintf(format, args...))
}

func (r *Report) warnf(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// File checks the file at path: a bootstrap, or a plugin configuration alone (see Bytes).
func File(path string) *Report {
	data, err := os.ReadFile(path)
	if err != nil {
		return &Report{Errors: []string{err.Error()}}
	}
	if IsPluginConfig(data, path) {
		return Plugin(data)
	}
	c, err := envoyconf.Parse(data)
	if err != nil {
		return &Report{Errors: bootstrapErrors(err)}
	}
	return checkBootstrap(c, parseSource(data))
}

// bootstrapErrors are the messages of a bootstrap Envoy would refuse, one per problem (the
// API's validation rules report every violation), without the Go package's name (the command
// names the file before each).
func bootstrapErrors(err error) []string {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var msgs []string
		for _, e := range joined.Unwrap() {
			msgs = append(msgs, bootstrapErrors(e)...)
		}
		return msgs
	}
	return []string{strings.TrimPrefix(err.Error(), "envoyconf: ")}
}

// Bytes checks a bootstrap given as YAML, or a plugin configuration alone (the JSON that
// `ratelimit-host -config` serves and configuration.value holds) when IsPluginConfig says
// the data is one.
func Bytes(data []byte) *Report {
	if IsPluginConfig(data, "") {
		return Plugin(data)
	}
	c, err := envoyconf.Parse(data)
	if err != nil {
		return &Report{Errors: bootstrapErrors(err)}
	}
	return checkBootstrap(c, parseSource(data))
}

// IsPluginConfig reports whether data (from a file called name, "" when none) is a plugin
// configuration rather than a bootstrap: a JSON or YAML object with a "rules" member, which
// no bootstrap has, or a file named *.json that does not parse (the plugin's parser then
// reports the syntax error at the file's own line and column).
func IsPluginConfig(data []byte, name string) bool {
	var top map[string]any
	if err := yaml.Unmarshal(data, &top); err != nil {
		return strings.HasSuffix(name, ".json")
	}
	_, ok := top["rules"]
	return ok
}

// Plugin checks a plugin configuration alone: the filter's parser, and the rules' checks that
// need no bootstrap. Route and virtual-host names and the redis cluster cannot be checked
// without the bootstrap that will carry the configuration; Report.Plugin says so.
func Plugin(data []byte) *Report {
	r := &Report{Plugin: true}
	cfg, err := config.Parse(data)
	if err != nil {
		addParseErrors(r, "", err, wholeFile(data))
		return r
	}
	checkRules(r, "", cfg, nil)
	return r
}

// Config checks a parsed bootstrap. Every listener with the filter is checked on its own:
// its routes are the only ones its rules can see.
func Config(c *envoyconf.Config) *Report { return checkBootstrap(c, nil) }

// checkBootstrap is Config with the bootstrap's YAML source, when known, to locate errors inside a
// plugin configuration by the file's line and column.
func checkBootstrap(c *envoyconf.Config, src *yamlSource) *Report {
	r := &Report{}
	filters := 0
	for _, l := range c.Listeners {
		if l.Filter == nil {
			continue
		}
		filters++
		checkListener(r, c, l, src)
	}
	if filters == 0 {
		r.errorf("no listener runs the Wasm filter (%s)", envoyconf.TypeWasmFilter)
	}
	return r
}

// addParseErrors reports the parser's error, one problem per line, each after where (when not
// empty) and located in the file by embedded (when known).
func addParseErrors(r *Report, where string, err error, embedded *embedded) {
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		line = embedded.locate(line)
		if where != "" {
			line = where + ": " + line
		}
		r.Errors = append(r.Errors, line)
	}
}

// checkListener parses the listener's filter configuration and cross-checks its rules
// against the listener's routes and connection manager, and its redis section against the
// bootstrap's clusters.
func checkListener(r *Report, c *envoyconf.Config, l *envoyconf.Listener, src *yamlSource) {
	where := "listener " + strconv.Quote(l.Name) + ", plugin " + strconv.Quote(l.Filter.PluginName)
	cfg, err := config.Parse(l.Filter.PluginConfig)
	if err != nil {
		// Each of the parser's lines is one problem with its JSON path.
		addParseErrors(r, where, err, src.find(l.Filter.PluginConfig))
		return
	}
	if cfg.Redis != nil && c.Clusters[cfg.Redis.Cluster] == nil {
		// Every callout to a cluster Envoy does not know fails at once, so every global rule
		// would answer with its failure mode on every request, silently.
		clusters := make([]string, 0, len(c.Clusters))
		for name := range c.Clusters {
			clusters = append(clusters, name)
		}
		sort.Strings(clusters)
		report := r.errorf
		if c.Bootstrap.GetDynamicResources().GetCdsConfig() != nil {
			// Clusters may also arrive over CDS, which this check cannot see.
			report = r.warnf
		}
		report("%s: redis.cluster: %q is no static cluster of this bootstrap%s; every global rule would answer with its failure mode",
			where, cfg.Redis.Cluster, didYouMean(cfg.Redis.Cluster, clusters))
	}
	routes := map[string]*envoyconf.Route{} // by name; unnamed routes cannot be selected
	vhosts := map[string]bool{}
	var routeNames, vhostNames []string
	for _, vh := range l.VirtualHosts {
		vhosts[vh.Name] = true
		vhostNames = append(vhostNames, vh.Name)
		for _, rt := range vh.Routes {
			if rt.Name != "" {
				if _, seen := routes[rt.Name]; !seen {
					routeNames = append(routeNames, rt.Name)
				}
				routes[rt.Name] = rt
			}
		}
	}
	sort.Strings(routeNames)
	sort.Strings(vhostNames)
	checkRules(r, where, cfg, &listenerRoutes{listener: l, routes: routes, vhosts: vhosts,
		routeNames: routeNames, vhostNames: vhostNames})
}

// listenerRoutes is what a listener offers its rules: routes by name, virtual hosts, and its
// connection manager's path settings.
type listenerRoutes struct {
	listener               *envoyconf.Listener
	routes                 map[string]*envoyconf.Route
	vhosts                 map[string]bool
	routeNames, vhostNames []string
}

// checkRules checks the rules of a plugin configuration, against the listener's routes when
// lr is not nil (a bootstrap), or alone (a plugin configuration file).
func checkRules(r *Report, where string, cfg *config.Config, lr *listenerRoutes) {
	prefix := where
	if prefix != "" {
		prefix += ": "
	}
	if rd := cfg.Redis; rd != nil && rd.Partitions > 1 && rd.TaggedPrefix() {
		r.warnf("%sredis.partitions: %d partitions spread nothing: the hash tag in key_prefix %q puts every key "+
			"on one slot; drop the braces from the prefix, or the partitions", prefix, rd.Partitions, rd.KeyPrefix)
	}
	var catchAll *config.Rule // an earlier rule that applies to every request and stops evaluation
	for _, rule := range cfg.Rules {
		at := fmt.Sprintf("%srules[%d] (%q)", prefix, rule.Index, rule.Name)
		if lr != nil {
			checkRuleRoutes(r, at, rule, lr)
		}
		if catchAll != nil {
			r.warnf("%s: can never apply: rules[%d] (%q) applies to every request before it and has no \"continue\": true",
				at, catchAll.Index, catchAll.Name)
		} else if matchesEverything(rule) && !rule.Continue {
			catchAll = rule
		}
		if lr != nil {
			checkPathSpelling(r, at, rule, lr.listener)
		}
		for i, kp := range rule.Key {
			if kp.Source == config.SourceClientIP && (kp.IPv6Prefix == 0 || kp.IPv6Prefix == 128) {
				r.warnf("%s: key[%d]: client_ip without ipv6_prefix: an IPv6 client is usually given a whole /64 "+
					"and can rotate through its addresses, each with a fresh allowance; add \"ipv6_prefix\": 64", at, i)
			}
		}
		if rule.Shadow && rule.ShadowHeaders && rule.RateLimitHeaders != config.HeadersNone {
			r.warnf("%s: a shadow rule with shadow_headers: clients that honour its rate-limit headers slow down "+
				"for a limit nobody enforces", at)
		}
	}
}

// checkRuleRoutes checks the routes and virtual hosts a rule names against the listener's.
func checkRuleRoutes(r *Report, at string, rule *config.Rule, lr *listenerRoutes) {
	m := &rule.Match
	for i, name := range m.Routes {
		if _, ok := lr.routes[name]; !ok {
			r.errorf("%s: match.routes[%d]: %q is no route of this listener%s; the rule would never apply",
				at, i, name, didYouMean(name, lr.routeNames))
		}
	}
	for i, name := range m.VirtualHosts {
		if !lr.vhosts[name] {
			r.errorf("%s: match.virtual_hosts[%d]: %q is no virtual host of this listener%s; the rule would never apply",
				at, i, name, didYouMean(name, lr.vhostNames))
		}
	}
	if len(m.Routes) > 0 && allDisabled(m.Routes, lr.routes) {
		r.warnf("%s: can never apply: the filter is disabled on every route it names (%s)",
			at, strings.Join(m.Routes, ", "))
	}
}

// checkPathSpelling warns about a rule that depends on how the request's path is spelt (a
// path condition, routes that Envoy chooses by the path, a key on the path, the :path header
// or the route name) when the listener's connection manager lets one path be spelt in several ways. Envoy
// then routes, and the filter reads the path, as the client wrote it, while upstreams
// usually serve "//login", "/./login" and (those that decode %2F) "/x/..%2Flogin" as
// "/login": such a spelling escapes a rule that selects requests by the path or the route,
// and counts under a key of its own, with a fresh allowance, in a rule keyed on the path.
//
// normalize_path, when unset, is false in Envoy unless its runtime key
// http_connection_manager.normalize_path turns it on; merge_slashes defaults to false and
// path_with_escaped_slashes_action to KEEP_UNCHANGED.
func checkPathSpelling(r *Report, at string, rule *config.Rule, l *envoyconf.Listener) {
	var off, fix []string
	if !l.NormalizePath {
		off, fix = append(off, "normalize_path: false"), append(fix, "normalize_path: true")
	}
	if !l.MergeSlashes {
		off, fix = append(off, "merge_slashes: false"), append(fix, "merge_slashes: true")
	}
	if l.EscapedSlashes == envoyconf.EscapedSlashesKeep {
		off = append(off, "path_with_escaped_slashes_action: "+envoyconf.EscapedSlashesKeep)
		fix = append(fix, "path_with_escaped_slashes_action: "+envoyconf.EscapedSlashesUnescapeRedirect+
			" or "+envoyconf.EscapedSlashesReject)
	}
	if len(off) == 0 {
		return
	}
	found := pathSelection(rule, l)
	for i, kp := range rule.Key {
		switch {
		case kp.Source == config.SourcePath, kp.Source == config.SourceHeader && kp.Name == ":path":
			// The :path header is the path as the client wrote it too (with its query).
			what, p := "the path", pathSample(rule.Match.Path)
			if kp.Source == config.SourceHeader {
				what = "the :path header"
			}
			found = append(found, fmt.Sprintf("key[%d] is %s: %q spelt %s counts under a key of its own, with a fresh allowance",
				i, what, p, orList(respellings(l, p))))
		case kp.Source == config.SourceRoute:
			if rt, s := pathRoutedSample(rule, l); rt != "" {
				found = append(found, fmt.Sprintf("key[%d] is the route name: %q spelt %s misses route %q, "+
					"and counts under the name of the route it reaches, with a fresh allowance", i, s, orList(respellings(l, s)), rt))
			}
		}
	}
	if len(found) == 0 {
		return
	}
	r.warnf("%s: depends on how the path is spelt, but the connection manager has %s: %s; set %s (see docs/routes.md)",
		at, strings.Join(off, ", "), strings.Join(found, "; "), joinAnd(fix))
}

// pathSample is a path for the warnings' examples: the rule's literal path condition, or
// "/path" when it has none (nil, a regex, or "/").
func pathSample(m *config.PathMatch) string {
	if m != nil && m.Kind != config.MatchRegex && len(m.Value) > 1 {
		return m.Value
	}
	return "/path"
}

// respellings are spellings of path p that the listener routes, and the filter reads, as
// written, and that upstreams usually serve as p: "/./p" without normalize_path, "//p"
// without merge_slashes, and "/x/..%2Fp" for an upstream that decodes %2F when escaped
// slashes are kept.
func respellings(l *envoyconf.Listener, p string) []string {
	var s []string
	if !l.NormalizePath {
		s = append(s, strconv.Quote("/."+p))
	}
	if !l.MergeSlashes {
		s = append(s, strconv.Quote("/"+p))
	}
	if l.EscapedSlashes == envoyconf.EscapedSlashesKeep {
		s = append(s, strconv.Quote("/x/..%2F"+p[1:])+" (if the upstream decodes %2F)")
	}
	return s
}

// detours are spellings of path p that the listener routes by prefix, a route's literal
// start, while upstreams usually serve them as p: "prefix/../p" without normalize_path, and
// "prefix/..%2Fp" for an upstream that decodes %2F when escaped slashes are kept.
func detours(l *envoyconf.Listener, prefix, p string) []string {
	var s []string
	if !l.NormalizePath {
		s = append(s, strconv.Quote(prefix+"/.."+p))
	}
	if l.EscapedSlashes == envoyconf.EscapedSlashesKeep {
		s = append(s, strconv.Quote(prefix+"/..%2F"+p[1:])+" (if the upstream decodes %2F)")
	}
	return s
}

// orList joins quoted items as "a", "a or b", "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// pathSelection says how the rule's selection of requests depends on the spelling of the
// path, with examples, if it does: its path condition or a header condition on :path; the
// routes it names, when Envoy chooses among the routes of their virtual host by the path (a
// spelling of the route's own path misses it, or a spelling of a path of the
// named catch-all route reaches a route before it); or, for a rule that names no route, a
// route where the filter is disabled that a spelling reaches (it then meets no rule at all).
func pathSelection(rule *config.Rule, l *envoyconf.Listener) []string {
	m := &rule.Match
	var found []string
	if m.Path != nil {
		p := pathSample(m.Path)
		found = append(found, fmt.Sprintf("match.path: %q spelt %s misses the condition", p, orList(respellings(l, p))))
	}
	for _, h := range m.Headers {
		if h.Name == ":path" {
			found = append(found, fmt.Sprintf("match.headers on :path: %q spelt %s is read as written",
				"/path", orList(respellings(l, "/path"))))
			break
		}
	}
	for _, vh := range l.VirtualHosts {
		if !admitsVirtualHost(rule, vh.Name) || !pathRouted(vh) {
			continue
		}
		var applies, exempt []*envoyconf.Route
		for _, rt := range vh.Routes {
			if selects(rule, rt.Name, vh.Name) && !rt.FilterDisabled {
				applies = append(applies, rt)
			} else {
				exempt = append(exempt, rt)
			}
		}
		if len(applies) == 0 || len(exempt) == 0 {
			// Whichever route a spelling reaches, the rule applies there as much as on the
			// route the path meant.
			continue
		}
		for _, rt := range applies {
			if len(m.Routes) == 0 {
				break // the rule applies wherever the filter runs: see the disabled routes below
			}
			if p := routeSample(rt); p != "" {
				found = append(found, fmt.Sprintf("match.routes: %q spelt %s misses route %q",
					p, orList(respellings(l, p)), rt.Name))
				continue
			}
			// A catch-all: the path of one of its requests, spelt to start like a route
			// the rule does not apply to, is taken by that route.
			if ex, e := detourRoute(exempt, false); ex != nil {
				if d := detours(l, e, "/path"); len(d) > 0 {
					found = append(found, fmt.Sprintf("match.routes: %q spelt %s reaches route %q rather than %q",
						"/path", orList(d), ex.Name, rt.Name))
				}
			}
		}
		if len(m.Routes) == 0 {
			if ex, e := detourRoute(exempt, true); ex != nil {
				if d := detours(l, e, "/path"); len(d) > 0 {
					found = append(found, fmt.Sprintf("%q spelt %s reaches route %q, where the filter is disabled",
						"/path", orList(d), ex.Name))
				}
			}
		}
	}
	return found
}

// detourRoute picks, among routes a rule does not apply to (only those where the filter is
// disabled when disabled is set), one with a literal start for detours, preferring one without
// header conditions, which every request can reach; nil when there is none.
func detourRoute(routes []*envoyconf.Route, disabled bool) (*envoyconf.Route, string) {
	var found *envoyconf.Route
	var start string
	for _, rt := range routes {
		if disabled && !rt.FilterDisabled {
			continue
		}
		e := strings.TrimSuffix(routeStart(rt), "/")
		if e == "" || found != nil && len(rt.Match.Headers) > 0 {
			continue
		}
		found, start = rt, e
		if len(rt.Match.Headers) == 0 {
			break
		}
	}
	return found, start
}

// pathRoutedSample finds a route the rule applies to in a virtual host where Envoy chooses
// routes by the path, with a path it matches: its name and the path, or "" when there is none.
func pathRoutedSample(rule *config.Rule, l *envoyconf.Listener) (name, path string) {
	for _, vh := range l.VirtualHosts {
		if !admitsVirtualHost(rule, vh.Name) || !pathRouted(vh) {
			continue
		}
		for _, rt := range vh.Routes {
			if p := routeSample(rt); p != "" && rt.Name != "" && selects(rule, rt.Name, vh.Name) && !rt.FilterDisabled {
				return rt.Name, p
			}
		}
	}
	return "", ""
}

func admitsVirtualHost(rule *config.Rule, vhost string) bool {
	return len(rule.Match.VirtualHosts) == 0 || contains(rule.Match.VirtualHosts, vhost)
}

// pathRouted reports whether Envoy chooses among the virtual host's routes by the path: some
// route matches on a path other than every path (prefix "/"), or on a header condition on
// :path.
func pathRouted(vh *envoyconf.VirtualHost) bool {
	for _, rt := range vh.Routes {
		if !(rt.Match.Kind == envoyconf.PathPrefix && (rt.Match.Value == "/" || rt.Match.Value == "")) {
			return true
		}
		for _, h := range rt.Match.Headers {
			if h.Name == ":path" {
				return true
			}
		}
	}
	return false
}

// routeSample is a path the route matches, for the examples: its start (routeStart), with
// "x" after a final "/" ("/api/x" for the prefix "/api/"); "" when it has none.
func routeSample(rt *envoyconf.Route) string {
	s := routeStart(rt)
	if strings.HasSuffix(s, "/") {
		s += "x"
	}
	return s
}

// routeStart is what every path the route matches starts with: its prefix or path, or the
// literal its regular expression starts with ("/login" for "(?i)/login(?:[^a-z0-9_-].*)?");
// "" when there is none longer than "/".
func routeStart(rt *envoyconf.Route) string {
	s := rt.Match.Value
	if rt.Match.Kind == envoyconf.PathRegex {
		s = ""
		if re, err := syntax.Parse(rt.Match.Value, syntax.Perl); err == nil {
			s = literalPrefix(re.Simplify())
		}
	}
	if len(s) < 2 || s[0] != '/' {
		return ""
	}
	return s
}

// literalPrefix is the text every match of re starts with, as far as its leading literals go.
func literalPrefix(re *syntax.Regexp) string {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return strings.ToLower(string(re.Rune))
		}
		return string(re.Rune)
	case syntax.OpConcat:
		var b strings.Builder
		for _, sub := range re.Sub {
			if sub.Op != syntax.OpLiteral {
				break
			}
			b.WriteString(literalPrefix(sub))
		}
		return b.String()
	case syntax.OpCapture:
		return literalPrefix(re.Sub[0])
	}
	return ""
}

// joinAnd joins "a", "b" and "c" as "a, b and c".
func joinAnd(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// matchesEverything reports whether the rule applies to every request: no condition, and
// every key part is always present (or has a default).
func matchesEverything(rule *config.Rule) bool {
	m := &rule.Match
	if len(m.Routes) > 0 || len(m.VirtualHosts) > 0 || m.Path != nil || len(m.Methods) > 0 || len(m.Headers) > 0 {
		return false
	}
	for _, kp := range rule.Key {
		switch kp.Source {
		case config.SourceHeader, config.SourceQuery, config.SourceRoute:
			// A request without the header, the parameter or a route name (no route matched,
			// or the route has no name) skips the rule, so the rule does not take it.
			if !kp.HasDefault {
				return false
			}
		}
	}
	return true
}

// allDisabled reports whether the filter is disabled on every named route that exists (and
// at least one exists).
func allDisabled(names []string, routes map[string]*envoyconf.Route) bool {
	found := false
	for _, n := range names {
		rt, ok := routes[n]
		if !ok {
			continue
		}
		if !rt.FilterDisabled {
			return false
		}
		found = true
	}
	return found
}

// didYouMean suggests the closest of known to name (at most a third of its characters
// apart), as ` (did you mean "x"?)`, or "" when none is close; with few candidates and none
// close it lists them, so the reader sees what exists.
func didYouMean(name string, known []string) string {
	best, bestD := "", len(name)/3+1
	for _, k := range known {
		if d := distance(strings.ToLower(name), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return " (did you mean " + strconv.Quote(best) + "?)"
	}
	if len(known) > 0 && len(known) <= 8 {
		q := make([]string, len(known))
		for i, k := range known {
			q[i] = strconv.Quote(k)
		}
		return " (it has " + strings.Join(q, ", ") + ")"
	}
	return ""
}

// distance is the optimal string alignment distance between a and b, in bytes: the
// Levenshtein edit distance with a transposition of two adjacent characters counted as one
// edit (Damerau), the commonest typing slip ("mian" for "main").
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
