package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"go.yaml.in/yaml/v3"
)

// importUsage is the import subcommand's help.
const importUsage = `usage: ratelimit-host import [-key KEY=SOURCE]... [-local] [-redis-cluster NAME] [-o FILE] ratelimit-config.yaml

Converts an envoyproxy/ratelimit configuration (domain, nested descriptors with key and value,
rate_limit with unit and requests_per_unit or unlimited, shadow_mode, replaces) into this
filter's JSON configuration, written to standard output (or -o FILE).

Each descriptor becomes a condition or a key part: a descriptor with a value is a condition on
its key's source (a value ending in '*' compares a prefix), one without a value, or with the
value '*', is a key part (each value counted apart). Each descriptor with a rate_limit becomes
a fixed_window rule (envoyproxy/ratelimit's windows are clock-aligned fixed windows) with
"continue": true, since every descriptor a request carries is limited; siblings with a value
under a generic one with a limit become the rule's overrides (the most specific match). Rules
are global (Redis through the -redis-cluster webdis cluster), like the service's counts,
unless -local.

A descriptor key is read from the request as -key KEY=SOURCE says: client_ip, path, method,
route, header:NAME or query:NAME. Without one, remote_address (Envoy's remote_address action)
is client_ip, and any other key is the request header of the same name: Envoy's route
actions that produced the key are not in this file, so check each assumed mapping listed.

What cannot be converted is listed by name on standard error ("not converted: ..."), as are
the assumptions made ("note: ..."). Exit status: 0 when a configuration was written, 1 when
none could be, 2 on a usage error.
`

// runImport is the import subcommand; it returns the process's exit status.
func runImport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var keys multiFlag
	fs.Var(&keys, "key", "how a descriptor key is read from the request, as KEY=SOURCE (repeatable): client_ip, path, method, route, header:NAME or query:NAME")
	local := fs.Bool("local", false, "make the rules local (this Envoy's count) instead of global")
	cluster := fs.String("redis-cluster", "webdis", "the webdis cluster of the redis section (global rules)")
	out := fs.String("o", "", "write the configuration to this file instead of standard output")
	fs.Usage = func() { fmt.Fprint(stderr, importUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	sources := map[string]keySource{}
	for _, kv := range keys {
		k, v, ok := strings.Cut(kv, "=")
		src, err := parseKeySource(v)
		if !ok || k == "" || err != nil {
			fmt.Fprintf(stderr, "ratelimit-host import: -key %q: want KEY=SOURCE with SOURCE one of client_ip, path, method, route, header:NAME, query:NAME\n", kv)
			return 2
		}
		sources[k] = src
	}
	data, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "ratelimit-host import:", err)
		return 1
	}
	res, err := importConfig(data, importOptions{sources: sources, local: *local, cluster: *cluster})
	for _, n := range res.notes {
		fmt.Fprintf(stderr, "%s: note: %s\n", fs.Arg(0), n)
	}
	for _, n := range res.unconverted {
		fmt.Fprintf(stderr, "%s: not converted: %s\n", fs.Arg(0), n)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %v\n", fs.Arg(0), err)
		return 1
	}
	if *out != "" {
		if err := os.WriteFile(*out, res.json, 0o644); err != nil {
			fmt.Fprintln(stderr, "ratelimit-host import:", err)
			return 1
		}
		return 0
	}
	_, _ = stdout.Write(res.json)
	return 0
}

// keySource is where a descriptor key's value is read from the request: a key part's source
// and, for a header or query parameter, its name.
type keySource struct{ source, name string }

func parseKeySource(s string) (keySource, error) {
	kind, name, _ := strings.Cut(s, ":")
	switch kind {
	case "client_ip", "path", "method", "route":
		if name == "" {
			return keySource{source: kind}, nil
		}
	case "header", "query":
		if name != "" {
			return keySource{source: kind, name: strings.ToLower(name)}, nil
		}
	}
	return keySource{}, fmt.Errorf("unknown source %q", s)
}

func (k keySource) String() string {
	if k.name != "" {
		return k.source + ":" + k.name
	}
	return k.source
}

// importOptions are the import subcommand's choices.
type importOptions struct {
	sources map[string]keySource
	local   bool
	cluster string
}

// importResult is a conversion: the JSON configuration, what could not be converted (by
// name) and the assumptions made.
type importResult struct {
	json        []byte
	unconverted []string
	notes       []string
}

// The envoyproxy/ratelimit configuration, as its README documents it.
type rlsConfig struct {
	Domain      string          `yaml:"domain"`
	Descriptors []rlsDescriptor `yaml:"descriptors"`
}

type rlsDescriptor struct {
	Key            string          `yaml:"key"`
	Value          string          `yaml:"value"`
	RateLimit      *rlsRateLimit   `yaml:"rate_limit"`
	ShadowMode     bool            `yaml:"shadow_mode"`
	DetailedMetric bool            `yaml:"detailed_metric"`
	Descriptors    []rlsDescriptor `yaml:"descriptors"`

	skip bool // the service never applies it, or it is not converted (see wildcards)
}

type rlsRateLimit struct {
	Name            string       `yaml:"name"`
	Replaces        []rlsReplace `yaml:"replaces"`
	Unit            string       `yaml:"unit"`
	RequestsPerUnit *int64       `yaml:"requests_per_unit"`
	Unlimited       bool         `yaml:"unlimited"`
}

type rlsReplace struct {
	Name string `yaml:"name"`
}

// The fields of each object of the format; any other is listed as not converted.
var (
	rlsConfigFields     = []string{"domain", "descriptors"}
	rlsDescriptorFields = []string{"key", "value", "rate_limit", "shadow_mode", "detailed_metric", "descriptors"}
	rlsRateLimitFields  = []string{"name", "replaces", "unit", "requests_per_unit", "unlimited"}
)

// unitWindows are the rate_limit units as the filter's windows.
var unitWindows = map[string]string{"second": "1s", "minute": "1m", "hour": "1h", "day": "1d", "week": "7d"}

// The filter's configuration, in the order its README lists the fields.
type outConfig struct {
	Domain string     `json:"domain,omitempty"`
	Redis  *outRedis  `json:"redis,omitempty"`
	Rules  []*outRule `json:"rules"`
}

type outRedis struct {
	Cluster string `json:"cluster"`
}

type outRule struct {
	Name        string        `json:"name"`
	Description string        `json:"description,omitempty"`
	Continue    bool          `json:"continue"`
	Shadow      bool          `json:"shadow,omitempty"`
	Match       *outMatch     `json:"match,omitempty"`
	Key         []outKeyPart  `json:"key,omitempty"`
	Algorithm   string        `json:"algorithm"`
	Limit       int64         `json:"limit"`
	Window      string        `json:"window"`
	Scope       string        `json:"scope,omitempty"`
	Overrides   []outOverride `json:"overrides,omitempty"`

	replaces []rlsReplace // the rate_limit's replaces, resolved once every rule is made
	fileName string       // the rate_limit's name as the file writes it, which replaces names
	path     string       // where its descriptor is, for messages
}

type outMatch struct {
	Routes  []string          `json:"routes,omitempty"`
	Path    map[string]string `json:"path,omitempty"`
	Methods []string          `json:"methods,omitempty"`
	Headers []outHeaderMatch  `json:"headers,omitempty"`
}

type outHeaderMatch struct {
	Name   string `json:"name"`
	Exact  string `json:"exact,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	Invert bool   `json:"invert,omitempty"`
}

type outKeyPart struct {
	Source     string `json:"source"`
	Name       string `json:"name,omitempty"`
	IPv6Prefix int    `json:"ipv6_prefix,omitempty"`
}

type outOverride struct {
	Part      int    `json:"part,omitempty"`
	Exact     string `json:"exact,omitempty"`
	Prefix    string `json:"prefix,omitempty"`
	Unlimited bool   `json:"unlimited,omitempty"`
	Limit     int64  `json:"limit,omitempty"`
	Window    string `json:"window,omitempty"`
}

// importer carries one conversion.
type importer struct {
	opts    importOptions
	res     importResult
	rules   []*outRule
	names   []string        // the rule names given, which a new one must not repeat (config.SameRuleName)
	assumed map[string]bool // keys mapped by default, noted once each
}

// importConfig converts an envoyproxy/ratelimit configuration.
func importConfig(data []byte, opts importOptions) (importResult, error) {
	im := &importer{opts: opts, assumed: map[string]bool{}}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return im.res, err
	}
	if len(root.Content) == 1 {
		im.unknownFields(root.Content[0], "", rlsConfigFields)
	}
	var c rlsConfig
	if err := root.Decode(&c); err != nil {
		return im.res, err
	}
	out := outConfig{Domain: im.domain(c.Domain)}
	im.list(c.Descriptors, "descriptors", descriptorContext{})
	im.resolveReplaces()
	if len(im.rules) == 0 {
		return im.res, errors.New("no descriptor with a rate limit could be converted")
	}
	if len(im.rules) > 256 {
		return im.res, fmt.Errorf("%d rules; the filter takes at most 256", len(im.rules))
	}
	if !opts.local {
		out.Redis = &outRedis{Cluster: opts.cluster}
	}
	out.Rules = im.rules
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return im.res, err
	}
	im.res.json = buf.Bytes()
	return im.res, nil
}

// unknownFields lists the members of the mapping n (at path) that the format does not have,
// and walks into the descriptors and rate limits it does.
func (im *importer) unknownFields(n *yaml.Node, path string, known []string) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		p := joinPath(path, k)
		switch {
		case !slices.Contains(known, k):
			im.unconverted(p, "unknown field")
		case k == "descriptors" && v.Kind == yaml.SequenceNode:
			for j, d := range v.Content {
				im.unknownFields(d, p+"["+strconv.Itoa(j)+"]", rlsDescriptorFields)
			}
		case k == "rate_limit":
			im.unknownFields(v, p, rlsRateLimitFields)
		}
	}
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func (im *importer) unconverted(path, why string) {
	im.res.unconverted = append(im.res.unconverted, path+": "+why)
}

func (im *importer) note(s string) { im.res.notes = append(im.res.notes, s) }

// domain returns the filter's domain for the service's: the same name where it is one the
// filter takes.
func (im *importer) domain(d string) string {
	if d == "" {
		im.unconverted("domain", "missing; the filter's default domain is used")
		return ""
	}
	if n := ruleName(d); n != d {
		im.note(fmt.Sprintf("domain %q is %q: a domain is [A-Za-z0-9_.-]{1,64}", d, n))
		return n
	}
	return d
}

// descriptorContext is what the descriptors above a list give the rules below it: conditions and key
// parts, and the rule name's parts.
type descriptorContext struct {
	match outMatch
	key   []outKeyPart
	keys  []string // the descriptor key of each key part
	name  []string
}

func (c descriptorContext) with() descriptorContext {
	n := descriptorContext{key: slices.Clone(c.key), keys: slices.Clone(c.keys), name: slices.Clone(c.name)}
	n.match = outMatch{Routes: slices.Clone(c.match.Routes), Methods: slices.Clone(c.match.Methods),
		Headers: slices.Clone(c.match.Headers)}
	if c.match.Path != nil {
		n.match.Path = map[string]string{}
		for k, v := range c.match.Path {
			n.match.Path[k] = v
		}
	}
	return n
}

// source returns how the descriptor key is read from the request.
func (im *importer) source(key string) keySource {
	if s, ok := im.opts.sources[key]; ok {
		return s
	}
	s := keySource{source: "header", name: strings.ToLower(key)}
	if key == "remote_address" {
		s = keySource{source: "client_ip"}
	}
	if !im.assumed[key] {
		im.assumed[key] = true
		im.note(fmt.Sprintf("descriptor key %q is read from %s (assumed; -key %s=SOURCE to change)", key, s, key))
	}
	return s
}

// list converts one descriptor list under the context ctx.
func (im *importer) list(ds []rlsDescriptor, path string, ctx descriptorContext) {
	im.wildcards(ds, path)
	for i := range ds {
		d := &ds[i]
		p := path + "[" + strconv.Itoa(i) + "]"
		if d.skip {
			continue
		}
		if d.Key == "" {
			im.unconverted(p+".key", "missing")
			continue
		}
		if d.DetailedMetric {
			im.unconverted(p+".detailed_metric", "the filter's metrics are per rule, not per descriptor value")
		}
		if d.Value == "" {
			im.generic(ds, d, p, ctx)
			continue
		}
		if im.asOverride(ds, d) {
			continue // converted with its generic sibling's rule
		}
		c := ctx.with()
		if !im.condition(&c.match, d.Key, d.Value, p+".value", false) || !im.exclusions(&c.match, ds, i, p) {
			continue
		}
		c.name = append(c.name, d.Key, d.Value)
		im.descriptor(d, p, c)
	}
}

// wildcards marks the descriptors of ds the service never applies, or that are not converted,
// and turns a value "*" into the key alone. The service looks a value up exactly first, then
// in each value with a '*' in their order, then in the key alone. So "*", which matches every
// value, is the key alone (each value counted apart), and the key alone beside it never
// applies; nor does a wildcard after one whose prefix it starts with, which the filter's
// longest matching prefix would prefer. A '*' before a value's end matches any characters
// there; the filter compares a value or a prefix only.
func (im *importer) wildcards(ds []rlsDescriptor, path string) {
	at := func(i int) string { return path + "[" + strconv.Itoa(i) + "]" }
	for i := range ds {
		d := &ds[i]
		prefix, isPrefix := strings.CutSuffix(d.Value, "*")
		if strings.Contains(prefix, "*") {
			d.skip = true
			im.unconverted(at(i)+".value", fmt.Sprintf("%q: the filter compares a value or a prefix (a '*' at its end)", d.Value))
			continue
		}
		for j := range i {
			e := &ds[j]
			if ePrefix, ok := strings.CutSuffix(e.Value, "*"); ok && isPrefix && !e.skip && e.Key == d.Key && strings.HasPrefix(prefix, ePrefix) {
				d.skip = true
				im.note(fmt.Sprintf("%s: never applies: the service matches every value %q matches to %s's %q first", at(i), d.Value, at(j), e.Value))
				break
			}
		}
	}
	for i := range ds {
		d := &ds[i]
		if d.skip || d.Value != "*" {
			continue
		}
		for j := range ds {
			if g := &ds[j]; !g.skip && g.Key == d.Key && g.Value == "" {
				g.skip = true
				im.note(fmt.Sprintf("%s: never applies: the service matches every value to %s's \"*\" first", at(j), at(i)))
			}
		}
		d.Value = ""
		im.note(fmt.Sprintf("%s: value \"*\" matches every value: converted as the key %q alone, each value counted apart", at(i), d.Key))
	}
}

// exclusions adds to m the inverted conditions that keep the requests the service applies a
// sibling to out of the rules of ds[i], a wildcard: the service applies one value of a key, an
// exact one first, then the first wildcard in order, while each of the filter's rules applies
// on its own. Only a header condition can be inverted; where another source would need one,
// ds[i] is listed as not converted and exclusions reports false.
func (im *importer) exclusions(m *outMatch, ds []rlsDescriptor, i int, p string) bool {
	d := &ds[i]
	prefix, isPrefix := strings.CutSuffix(d.Value, "*")
	if !isPrefix {
		return true
	}
	var taken []int // the siblings that take some of d's values
	for j := range ds {
		s := &ds[j]
		sPrefix, sIsPrefix := strings.CutSuffix(s.Value, "*")
		if j == i || s.skip || s.Key != d.Key || s.Value == "" || !strings.HasPrefix(sPrefix, prefix) || sIsPrefix && j > i {
			continue
		}
		// An exact value an earlier wildcard also takes is excluded with that wildcard.
		if !sIsPrefix && slices.ContainsFunc(ds[:i], func(e rlsDescriptor) bool {
			ePrefix, ok := strings.CutSuffix(e.Value, "*")
			return ok && !e.skip && e.Key == d.Key && strings.HasPrefix(ePrefix, prefix) && strings.HasPrefix(s.Value, ePrefix)
		}) {
			continue
		}
		taken = append(taken, j)
	}
	for _, j := range taken {
		if !im.condition(m, d.Key, ds[j].Value, p, true) {
			im.unconverted(p+".value", fmt.Sprintf("%q: the service applies %s's %q to some of its requests, which only a header condition could exclude here",
				d.Value, siblingPath(p, j), ds[j].Value))
			return false
		}
	}
	return true
}

// generic converts a descriptor without a value: a key part, below which its siblings with a
// value are excluded where a header condition can say so (the service applies the most
// specific match).
func (im *importer) generic(siblings []rlsDescriptor, d *rlsDescriptor, p string, ctx descriptorContext) {
	src := im.source(d.Key)
	c := ctx.with()
	for j := range siblings {
		s := &siblings[j]
		if s.skip || s.Key != d.Key || s.Value == "" || im.asOverride(siblings, s) {
			continue
		}
		if src.source != "header" {
			im.note(fmt.Sprintf("%s: requests whose %s is %q also count under this descriptor's rules (only a header condition can exclude them)", p, d.Key, s.Value))
			continue
		}
		im.condition(&c.match, d.Key, s.Value, p, true)
	}
	part := outKeyPart{Source: src.source, Name: src.name}
	if src.source == "client_ip" {
		if v := im.ipv6Override(siblings, d); v != "" {
			// A key part with ipv6_prefix 64 holds "2001:db8::/64", which no override of one
			// address matches: the service counts each address apart, and so does this part.
			im.note(fmt.Sprintf("%s: client_ip key part without ipv6_prefix: an override of the IPv6 address %q "+
				"matches only a key of whole addresses, which the service counts apart", p, v))
		} else {
			part.IPv6Prefix = 64
			im.noteOnce("client_ip key parts take ipv6_prefix 64 (one IPv6 client is a /64)")
		}
	}
	c.key = append(c.key, part)
	c.keys = append(c.keys, d.Key)
	c.name = append(c.name, d.Key)
	im.descriptor(d, p, c)
	if r := im.lastRuleFor(p); r != nil {
		im.overrides(r, siblings, d, len(c.key)-1, src)
	} else if d.RateLimit != nil && !d.RateLimit.Unlimited {
		for j := range siblings {
			if s := &siblings[j]; s.Key == d.Key && im.asOverride(siblings, s) {
				im.unconverted(siblingPath(p, j), "overrides the limit of the key alone, which is not converted")
			}
		}
	}
}

// ipv6Override returns the first value converted as an override of g, the generic descriptor
// among siblings, that is an IPv6 address (not an IPv4-mapped one, which names an IPv4
// client) or a prefix with a ':', or "".
func (im *importer) ipv6Override(siblings []rlsDescriptor, g *rlsDescriptor) string {
	for j := range siblings {
		s := &siblings[j]
		if s.Key != g.Key || !im.asOverride(siblings, s) {
			continue
		}
		prefix, isPrefix := strings.CutSuffix(s.Value, "*")
		if ip, err := netip.ParseAddr(s.Value); err == nil && ip.Unmap().Is6() || isPrefix && strings.Contains(prefix, ":") {
			return s.Value
		}
	}
	return ""
}

// siblingPath returns the path of the j-th descriptor of the list the descriptor at p is in.
func siblingPath(p string, j int) string {
	return p[:strings.LastIndexByte(p, '[')] + "[" + strconv.Itoa(j) + "]"
}

func (im *importer) noteOnce(s string) {
	if !slices.Contains(im.res.notes, s) {
		im.note(s)
	}
}

// asOverride reports whether d, a descriptor with a value, is converted as an override of its
// generic sibling's rule: the sibling has a limit, d has a limit (or is unlimited), no nested
// descriptors and the same shadow_mode.
func (im *importer) asOverride(siblings []rlsDescriptor, d *rlsDescriptor) bool {
	if d.skip || d.Value == "" || d.RateLimit == nil || len(d.Descriptors) > 0 || d.RateLimit.Name != "" || len(d.RateLimit.Replaces) > 0 {
		return false
	}
	for j := range siblings {
		g := &siblings[j]
		if !g.skip && g.Key == d.Key && g.Value == "" && g.RateLimit != nil && !g.RateLimit.Unlimited && g.ShadowMode == d.ShadowMode {
			return true
		}
	}
	return false
}

// overrides adds to r, the rule of the generic descriptor g, its siblings' values as
// overrides of the key part part, read from src.
//
// The filter's key holds a client address as netip writes it (IPv6 compressed and lower-case,
// an IPv4-mapped address unmapped, no zone), so an address written another way is rewritten
// to match. The values written that way already come first: where two values are one
// address, the service, which compares text, applies the one in the form Envoy sends.
func (im *importer) overrides(r *outRule, siblings []rlsDescriptor, g *rlsDescriptor, part int, src keySource) {
	for _, rewrittenPass := range []bool{false, true} {
		for j := range siblings {
			s := &siblings[j]
			if s.Key != g.Key || !im.asOverride(siblings, s) {
				continue
			}
			o := outOverride{Part: part, Exact: s.Value}
			if v, ok := strings.CutSuffix(s.Value, "*"); ok {
				o.Exact, o.Prefix = "", v
			}
			p := siblingPath(r.path, j)
			if o.Exact != "" && src.source == "client_ip" {
				ip, err := netip.ParseAddr(o.Exact)
				if err != nil {
					if !rewrittenPass {
						im.unconverted(p+".value", fmt.Sprintf("%q: not an IP address: the service compares it with the client's address, which it never is", s.Value))
					}
					continue
				}
				o.Exact = ip.Unmap().WithZone("").String()
			}
			if rewritten := o.Exact+o.Prefix != strings.TrimSuffix(s.Value, "*"); rewritten != rewrittenPass {
				continue
			}
			if slices.ContainsFunc(r.Overrides, func(prev outOverride) bool { return prev.Exact == o.Exact && prev.Prefix == o.Prefix }) {
				im.unconverted(p+".value", fmt.Sprintf("%q: another override of the key has the value %q", s.Value, o.Exact+o.Prefix))
				continue
			}
			if rewrittenPass {
				im.note(fmt.Sprintf("%s.value: %q is written %q, as the filter's key holds the address", p, s.Value, o.Exact))
			}
			if s.RateLimit.Unlimited {
				o.Unlimited = true
			} else {
				limit, window, ok := im.rate(s.RateLimit, p+".rate_limit")
				if !ok {
					continue
				}
				o.Limit, o.Window = limit, window
			}
			if len(r.Overrides) == 64 {
				im.unconverted(p, "more than 64 values under one key")
				continue
			}
			r.Overrides = append(r.Overrides, o)
		}
	}
}

// descriptor converts d's rate limit (if any) into a rule and its nested descriptors.
func (im *importer) descriptor(d *rlsDescriptor, p string, c descriptorContext) {
	if rl := d.RateLimit; rl != nil {
		switch {
		case rl.Unlimited:
			im.note(p + ": unlimited: no rule (the filter limits only what a rule matches)")
		default:
			if limit, window, ok := im.rate(rl, p+".rate_limit"); ok {
				im.rule(d, p, c, limit, window)
			}
		}
	} else if d.ShadowMode {
		im.unconverted(p+".shadow_mode", "the descriptor has no rate_limit")
	}
	if len(d.Descriptors) > 0 {
		im.list(d.Descriptors, p+".descriptors", c)
	}
}

// rate returns a rate limit's limit and window.
func (im *importer) rate(rl *rlsRateLimit, p string) (int64, string, bool) {
	window, ok := unitWindows[strings.ToLower(rl.Unit)]
	if !ok {
		im.unconverted(p+".unit", fmt.Sprintf("%q: the filter's windows reach 31 days (second, minute, hour, day and week convert)", rl.Unit))
		return 0, "", false
	}
	switch {
	case rl.RequestsPerUnit == nil:
		im.unconverted(p+".requests_per_unit", "missing")
		return 0, "", false
	case *rl.RequestsPerUnit == 0:
		im.unconverted(p+".requests_per_unit", "0 (deny every request): a limit is at least 1")
		return 0, "", false
	case *rl.RequestsPerUnit < 0 || *rl.RequestsPerUnit > 1_000_000_000:
		im.unconverted(p+".requests_per_unit", fmt.Sprintf("%d: a limit is 1 to 10^9", *rl.RequestsPerUnit))
		return 0, "", false
	}
	return *rl.RequestsPerUnit, window, true
}

// rule adds the rule of a descriptor with a rate limit.
func (im *importer) rule(d *rlsDescriptor, p string, c descriptorContext, limit int64, window string) {
	name := ruleName(strings.Join(c.name, "_"))
	if d.RateLimit.Name != "" {
		name = ruleName(d.RateLimit.Name)
	}
	base := name
	for i := 2; slices.ContainsFunc(im.names, func(n string) bool { return config.SameRuleName(n, name) }); i++ {
		suffix := "_" + strconv.Itoa(i)
		name = base[:min(len(base), 64-len(suffix))] + suffix
	}
	im.names = append(im.names, name)
	r := &outRule{Name: name, Continue: true, Shadow: d.ShadowMode, Key: c.key,
		Algorithm: "fixed_window", Limit: limit, Window: window, replaces: d.RateLimit.Replaces,
		fileName: d.RateLimit.Name, path: p}
	r.Description = "envoyproxy/ratelimit " + p
	if m := c.match; len(m.Routes)+len(m.Methods)+len(m.Headers) > 0 || m.Path != nil {
		r.Match = &m
	}
	if !im.opts.local {
		r.Scope = "global"
	}
	im.rules = append(im.rules, r)
}

// lastRuleFor returns the rule made for the descriptor at p, or nil.
func (im *importer) lastRuleFor(p string) *outRule {
	for i := len(im.rules) - 1; i >= 0; i-- {
		if im.rules[i].path == p {
			return im.rules[i]
		}
	}
	return nil
}

// condition adds to m the condition that key's source has value (a value ending in '*': the
// prefix before it), or with invert that it has not. It reports whether the source has such a
// condition.
func (im *importer) condition(m *outMatch, key, value, p string, invert bool) bool {
	src := im.source(key)
	prefix, isPrefix := strings.CutSuffix(value, "*")
	switch {
	case src.source == "header":
		h := outHeaderMatch{Name: src.name, Invert: invert}
		if isPrefix {
			h.Prefix = prefix
		} else {
			h.Exact = value
		}
		m.Headers = append(m.Headers, h)
		return true
	case invert:
		return false
	case src.source == "path" && m.Path == nil:
		if isPrefix {
			m.Path = map[string]string{"prefix": prefix}
		} else {
			m.Path = map[string]string{"exact": value}
		}
		return true
	case src.source == "method" && !isPrefix && len(m.Methods) == 0:
		m.Methods = []string{strings.ToUpper(value)}
		return true
	case src.source == "route" && !isPrefix && len(m.Routes) == 0:
		m.Routes = []string{value}
		return true
	}
	im.unconverted(p, fmt.Sprintf("%q: the filter has no condition on a %s's value here", value, src))
	return false
}

// resolveReplaces turns each rule's replaces into a condition on the rules it replaces: each
// rule whose rate_limit the file gives that name (the service's names, not the ones the
// importer makes unique) then skips the requests the replacing rule applies to, where one
// header condition of the replacing rule, inverted, says so.
func (im *importer) resolveReplaces() {
	for _, r := range im.rules {
		for _, rep := range r.replaces {
			p := r.path + ".rate_limit.replaces"
			found := false
			for _, target := range im.rules {
				if target != r && rep.Name != "" && target.fileName == rep.Name {
					found = true
					im.replace(r, target, rep.Name, p)
				}
			}
			if !found {
				im.unconverted(p, fmt.Sprintf("%q names no rate limit", rep.Name))
			}
		}
	}
}

// replace adds to target, a rule r replaces by the name name, the one header condition of r
// that target lacks, inverted.
func (im *importer) replace(r, target *outRule, name, p string) {
	var extra []outHeaderMatch
	if r.Match != nil {
		for _, h := range r.Match.Headers {
			if target.Match == nil || !slices.Contains(target.Match.Headers, h) {
				extra = append(extra, h)
			}
		}
	}
	if len(extra) != 1 || extra[0].Invert || !sameKey(r, target) || r.Match.Path != nil || len(r.Match.Methods)+len(r.Match.Routes) > 0 {
		im.unconverted(p, fmt.Sprintf("%q: the filter can drop rule %q only where one header condition tells the two apart", name, target.Name))
		return
	}
	h := extra[0]
	h.Invert = true
	if target.Match == nil {
		target.Match = &outMatch{}
	}
	target.Match.Headers = append(target.Match.Headers, h)
	im.note(fmt.Sprintf("%s: replaces %q: rule %q skips requests with header %s %s", r.path, name, target.Name, h.Name, h.Exact+h.Prefix))
}

func sameKey(a, b *outRule) bool { return slices.Equal(a.Key, b.Key) }

// ruleName makes s a name the filter takes: [A-Za-z0-9_.-], 1 to 64 bytes.
func ruleName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "rule"
	}
	return string(b[:min(len(b), 64)])
}
