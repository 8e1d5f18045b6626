package envoycheck

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
)

// Describe renders, for every listener that runs the filter, its routes in order with the
// rules that can apply to each: what `make run` prints, generated from the bootstrap so that
// it never goes stale when envoy.yaml changes. A rule applies to a route when it names the
// route (or its virtual host) or names none; the filter's first-match order and the rules'
// other conditions (path, method, headers) are shown, not evaluated.
func Describe(c *envoyconf.Config) string {
	var b strings.Builder
	for _, l := range c.Listeners {
		if l.Filter == nil {
			continue
		}
		cfg, err := config.Parse(l.Filter.PluginConfig)
		if err != nil {
			fmt.Fprintf(&b, "listener %s: the filter configuration is invalid (run the check command)\n", l.Name)
			continue
		}
		fmt.Fprintf(&b, "Listener %s (%s): routes in order, and the rules that can apply\n", l.Name, l.Address)
		for _, vh := range l.VirtualHosts {
			for _, rt := range vh.Routes {
				match := rt.Match.Kind.String() + " " + rt.Match.Value
				for _, h := range rt.Match.Headers {
					if h.Name == ":method" {
						match = h.Value + " " + match
					}
				}
				name := rt.Name
				if name == "" {
					name = "(unnamed)"
				}
				fmt.Fprintf(&b, "  %-14s %s\n", name, match)
				if rt.Direct != nil {
					fmt.Fprintf(&b, "                   answered by the proxy with %d (direct_response), after the filter's rules\n", rt.Direct.Status)
				}
				if rt.FilterDisabled {
					b.WriteString("                   not rate limited: the filter is disabled on this route\n")
					continue
				}
				n := 0
				for _, r := range cfg.Rules {
					if !selects(r, rt.Name, vh.Name) {
						continue
					}
					fmt.Fprintf(&b, "                   %s\n", describeRule(r))
					n++
				}
				if n == 0 {
					b.WriteString("                   no rule\n")
				}
			}
		}
	}
	return b.String()
}

// selects reports whether the rule's route and virtual-host conditions admit the route.
func selects(r *config.Rule, route, vhost string) bool {
	m := &r.Match
	return (len(m.Routes) == 0 || contains(m.Routes, route)) &&
		(len(m.VirtualHosts) == 0 || contains(m.VirtualHosts, vhost))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// describeRule is one line about a rule: name, limit, algorithm, key, and what else it needs.
func describeRule(r *config.Rule) string {
	a := r.Algorithm
	s := fmt.Sprintf("%s: %d per %s (%s", r.Name, a.Limit, formatWindow(a.Window), a.Algorithm)
	if a.Variant != "" && a.Algorithm == "sliding_window" {
		s += " " + a.Variant
	}
	if a.Burst > 0 && a.Burst != a.Limit {
		s += fmt.Sprintf(", burst %d", a.Burst)
	}
	s += ")"
	var keys []string
	for _, kp := range r.Key {
		switch kp.Source {
		case config.SourceHeader, config.SourceQuery:
			keys = append(keys, string(kp.Source)+" "+kp.Name)
		default:
			keys = append(keys, string(kp.Source))
		}
	}
	if len(keys) > 0 {
		s += " per " + strings.Join(keys, " + ")
	}
	if r.Scope == config.ScopeGlobal {
		s += ", global (Redis)"
	}
	if r.Match.Path != nil {
		s += ", path " + r.Match.Path.Value
	}
	if len(r.Match.Methods) > 0 {
		s += ", " + strings.Join(r.Match.Methods, "/") + " only"
	}
	if r.Shadow {
		s += ", shadow: measured, never enforced"
	}
	if len(r.Overrides) > 0 {
		s += fmt.Sprintf(", %d override(s)", len(r.Overrides))
	}
	return s
}

// formatWindow renders a window the way configurations write it ("1m", "10s", "1h30m").
func formatWindow(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
