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
// path rules on a listener that does not normalise paths, per-IP keys without an IPv6
// prefix, and shadow rules whose headers reach clients.
package envoycheck

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
)

// Report is the outcome of a check. A configuration with errors must not be deployed;
// warnings describe valid configurations that probably do not do what was meant.
type Report struct {
	Errors   []string
	Warnings []string
}

// OK reports whether the check found no errors (warnings allowed).
func (r *Report) OK() bool { return len(r.Errors) == 0 }

func (r *Report) errorf(format string, args ...any) {
	r.Errors = append(r.Errors, fmt.Sprintf(format, args...))
}

func (r *Report) warnf(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// File checks the bootstrap at path.
func File(path string) *Report {
	c, err := envoyconf.Load(path)
	if err != nil {
		return &Report{Errors: []string{err.Error()}}
	}
	return Config(c)
}

// Bytes checks a bootstrap given as YAML.
func Bytes(data []byte) *Report {
	c, err := envoyconf.Parse(data)
	if err != nil {
		return &Report{Errors: []string{err.Error()}}
	}
	return Config(c)
}

// Config checks a parsed bootstrap. Every listener with the filter is checked on its own:
// its routes are the only ones its rules can see.
func Config(c *envoyconf.Config) *Report {
	r := &Report{}
	filters := 0
	for _, l := range c.Listeners {
		if l.Filter == nil {
			continue
		}
		filters++
		checkListener(r, c, l)
	}
	if filters == 0 {
		r.errorf("no listener runs the Wasm filter (%s)", envoyconf.TypeWasmFilter)
	}
	return r
}

// checkListener parses the listener's filter configuration and cross-checks its rules
// against the listener's routes and connection manager, and its redis section against the
// bootstrap's clusters.
func checkListener(r *Report, c *envoyconf.Config, l *envoyconf.Listener) {
	where := "listener " + strconv.Quote(l.Name) + ", plugin " + strconv.Quote(l.Filter.PluginName)
	cfg, err := config.Parse(l.Filter.PluginConfig)
	if err != nil {
		// Each of the parser's lines is one problem with its JSON path.
		for _, line := range strings.Split(err.Error(), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				r.errorf("%s: %s", where, line)
			}
		}
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
	var catchAll *config.Rule // an earlier rule that applies to every request and stops evaluation
	for _, rule := range cfg.Rules {
		at := fmt.Sprintf("%s: rules[%d] (%q)", where, rule.Index, rule.Name)
		m := &rule.Match
		for i, name := range m.Routes {
			if _, ok := routes[name]; !ok {
				r.errorf("%s: match.routes[%d]: %q is no route of this listener%s; the rule would never apply",
					at, i, name, didYouMean(name, routeNames))
			}
		}
		for i, name := range m.VirtualHosts {
			if !vhosts[name] {
				r.errorf("%s: match.virtual_hosts[%d]: %q is no virtual host of this listener%s; the rule would never apply",
					at, i, name, didYouMean(name, vhostNames))
			}
		}
		if len(m.Routes) > 0 && allDisabled(m.Routes, routes) {
			r.warnf("%s: can never apply: the filter is disabled on every route it names (%s)",
				at, strings.Join(m.Routes, ", "))
		}
		if catchAll != nil {
			r.warnf("%s: can never apply: rules[%d] (%q) applies to every request before it and has no \"continue\": true",
				at, catchAll.Index, catchAll.Name)
		} else if matchesEverything(rule) && !rule.Continue {
			catchAll = rule
		}
		if m.Path != nil && (!l.NormalizePath || !l.MergeSlashes) {
			r.warnf("%s: matches paths, but the connection manager has normalize_path: %v, merge_slashes: %v: "+
				"/api/../login or //login would escape the rule; set both to true", at, l.NormalizePath, l.MergeSlashes)
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
