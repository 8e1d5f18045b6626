// Package confchange says what a configuration change does to the state the filter keeps
// (`check -previous OLD NEW`, which package envoycheck runs on two files):
// for each rule of the new configuration, whether the clients' counts are kept, converted to
// the new parameters without granting allowance, or reset (every client of the rule, or some
// of them, starts with a full allowance). docs/config-changes.md is the table of what causes
// each; this package encodes it from where the filter keeps state:
//
//   - local rules: Envoy's shared data of the vm_id, under "<domain>|<rule>|", each key's
//     state under its descriptor, which the key parts build (a client_ip part from the
//     address trusted_hops selects, among those the connection manager derives);
//   - global rules: Redis, under <key_prefix>:{<domain>}:<rule>:<descriptor> (with partitions,
//     <key_prefix>:{<domain>:<rule>:<p>}:<descriptor>, p chosen among redis.partitions);
//   - an override's clients are the rule's keys, decided under the override's parameters;
//   - every state records the algorithm and parameters it was written under, and a state read
//     under others is converted (package algorithms, "Configuration changes"), so parameter
//     changes never grant allowance; max_keys changes keep the keys (sharedstate remembers
//     earlier table layouts, Redis keys do not depend on it).
package confchange

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// ChangeKind is what a configuration change does to a rule's state.
type ChangeKind string

// The change kinds, from harmless to the one that grants allowance.
const (
	// ChangeKept: the state is read as it is.
	ChangeKept ChangeKind = "kept"
	// ChangeConverted: the state is read under the new parameters, converted: each client
	// keeps what it used, and is allowed at most the new capacity; nothing is granted.
	ChangeConverted ChangeKind = "converted without grant"
	// ChangeReset: the rule's clients (or some of them: the reasons say which) start from a
	// fresh key, with their whole allowance, whatever they used before.
	ChangeReset ChangeKind = "reset"
	// ChangeAdded: a rule the old configuration did not have; it starts empty.
	ChangeAdded ChangeKind = "new"
	// ChangeRemoved: a rule the new configuration drops; its state is no longer read.
	ChangeRemoved ChangeKind = "removed"
)

// RuleChange is what the change does to one rule.
type RuleChange struct {
	// Where names the listener and plugin (empty for a plugin configuration file).
	Where string
	// Rule is the rule's name (in the new configuration; in the old one when removed).
	Rule    string
	Kind    ChangeKind
	Reasons []string
}

// String renders the change as check prints it.
func (c RuleChange) String() string {
	s := "rule " + strconv.Quote(c.Rule) + ": " + string(c.Kind)
	if c.Where != "" {
		s = c.Where + ": " + s
	}
	if len(c.Reasons) > 0 {
		s += " (" + strings.Join(c.Reasons, "; ") + ")"
	}
	return s
}

// Plugin is one filter configuration, as a configuration change pairs and compares them.
type Plugin struct {
	Where  string // "listener \"x\", plugin \"y\"", or "" for a plugin configuration file
	Key    string // what pairs it with its counterpart: the listener's name, or ""
	VMID   string // the shared-data namespace; "" when unknown (a plugin configuration file)
	Config *config.Config
	// ClientAddress is how the listener's connection manager derives the client address that
	// client_ip key parts read; nil when unknown (a plugin configuration file).
	ClientAddress *ClientAddress
}

// ClientAddress is what Envoy's connection manager derives the client address from: the
// source.address the filter reads (use_remote_address, xff_num_trusted_hops), and the
// X-Forwarded-For it reads with trusted_hops (which Envoy appends the peer to under
// use_remote_address unless skip_xff_append).
type ClientAddress struct {
	UseRemoteAddress bool // use_remote_address
	XFFTrustedHops   int  // xff_num_trusted_hops
	SkipXFFAppend    bool // skip_xff_append
}

// Compare says, for every rule of the configurations in news, what changing from those in
// olds (read from oldName) does to its state: listeners are paired by name, or directly when
// each side has one filter configuration. Every reset is also a warning, and so is a
// configuration with no counterpart.
func Compare(olds, news []Plugin, oldName string) (changes []RuleChange, warnings []string) {
	for _, n := range news {
		o, ok := counterpart(olds, news, n)
		if !ok {
			warnings = append(warnings, fmt.Sprintf("%s: no counterpart in %s; every rule starts empty", n.Where, oldName))
			continue
		}
		where := n.Where
		if where == "" {
			where = o.Where
		}
		for _, c := range compareConfigs(o, n) {
			c.Where = where
			changes = append(changes, c)
			if c.Kind == ChangeReset {
				warnings = append(warnings, fmt.Sprintf("%s: its clients start afresh with their whole allowance", c))
			}
		}
	}
	return changes, warnings
}

// counterpart finds the old configuration to compare n with.
func counterpart(olds, news []Plugin, n Plugin) (Plugin, bool) {
	if len(olds) == 1 && len(news) == 1 {
		return olds[0], true
	}
	for _, o := range olds {
		if o.Key == n.Key && n.Key != "" {
			return o, true
		}
	}
	return Plugin{}, false
}

// compareConfigs compares the rules of two configurations, in the new one's order, then the
// removed ones.
func compareConfigs(o, n Plugin) []RuleChange {
	// What resets every rule, or every local or global rule, whatever the rule itself says.
	var all, local, global []string
	if o.Config.Domain != n.Config.Domain {
		all = append(all, fmt.Sprintf("domain %q -> %q: every state key is renamed", o.Config.Domain, n.Config.Domain))
	}
	if o.VMID != "" && n.VMID != "" && o.VMID != n.VMID {
		local = append(local, fmt.Sprintf("vm_id %q -> %q: another shared-data namespace", o.VMID, n.VMID))
	}
	if o.Config.Redis != nil && n.Config.Redis != nil {
		or, nr := o.Config.Redis, n.Config.Redis
		if or.KeyPrefix != nr.KeyPrefix {
			global = append(global, fmt.Sprintf("redis.key_prefix %q -> %q: every Redis key is renamed", or.KeyPrefix, nr.KeyPrefix))
		}
		if max(or.Partitions, 1) != max(nr.Partitions, 1) {
			global = append(global, fmt.Sprintf("redis.partitions %d -> %d: every Redis key moves to another hash tag",
				max(or.Partitions, 1), max(nr.Partitions, 1)))
		}
	}
	// What makes every client_ip key part read another address: the rules keyed on one count
	// every client under a new key.
	var clientIP []string
	if o.Config.TrustedHops != n.Config.TrustedHops {
		clientIP = append(clientIP, fmt.Sprintf("trusted_hops %d -> %d: client_ip reads another hop of X-Forwarded-For, "+
			"so clients count under another address", o.Config.TrustedHops, n.Config.TrustedHops))
	}
	if oa, na := o.ClientAddress, n.ClientAddress; oa != nil && na != nil {
		const why = ": Envoy derives the client address (source.address, X-Forwarded-For) that client_ip reads otherwise"
		if oa.UseRemoteAddress != na.UseRemoteAddress {
			clientIP = append(clientIP, fmt.Sprintf("use_remote_address %v -> %v%s", oa.UseRemoteAddress, na.UseRemoteAddress, why))
		}
		if oa.XFFTrustedHops != na.XFFTrustedHops {
			clientIP = append(clientIP, fmt.Sprintf("xff_num_trusted_hops %d -> %d%s", oa.XFFTrustedHops, na.XFFTrustedHops, why))
		}
		// skip_xff_append only decides whether Envoy appends the peer to X-Forwarded-For, which
		// it does only under use_remote_address; the address it reports as source.address is
		// derived before. It changes what client_ip reads only when client_ip reads the header.
		readsXFF := o.Config.TrustedHops > 0 || n.Config.TrustedHops > 0
		if oa.SkipXFFAppend != na.SkipXFFAppend && readsXFF && (oa.UseRemoteAddress || na.UseRemoteAddress) {
			clientIP = append(clientIP, fmt.Sprintf("skip_xff_append %v -> %v: decides whether Envoy appends the peer "+
				"to the X-Forwarded-For that client_ip reads with trusted_hops > 0", oa.SkipXFFAppend, na.SkipXFFAppend))
		}
	}
	oldRules := map[string]*config.Rule{}
	for _, r := range o.Config.Rules {
		oldRules[r.Name] = r
	}
	kept := map[string]bool{}
	var out []RuleChange
	for _, nr := range n.Config.Rules {
		or, ok := oldRules[nr.Name]
		if !ok {
			out = append(out, addedRule(nr, o.Config, n.Config))
			continue
		}
		kept[nr.Name] = true
		c := compareRule(or, nr)
		resets := append([]string(nil), all...)
		if nr.Scope == or.Scope {
			if nr.Scope == config.ScopeGlobal {
				resets = append(resets, global...)
			} else {
				resets = append(resets, local...)
			}
		}
		if hasClientIP(nr.Key) && sameKeyParts(or.Key, nr.Key) {
			// (A change of the key parts themselves is its own reason.)
			resets = append(resets, clientIP...)
		}
		if len(resets) > 0 {
			c.Kind, c.Reasons = ChangeReset, append(resets, c.Reasons...)
		}
		out = append(out, c)
	}
	for _, or := range o.Config.Rules {
		if !kept[or.Name] {
			out = append(out, RuleChange{Rule: or.Name, Kind: ChangeRemoved, Reasons: []string{"its state is no longer read"}})
		}
	}
	return out
}

// addedRule is the change for a rule the old configuration does not have by that name: new,
// or, when an old rule that the new configuration drops counted the same clients (same scope
// and key), that rule renamed, whose clients start afresh.
func addedRule(nr *config.Rule, oldCfg, newCfg *config.Config) RuleChange {
	for _, or := range oldCfg.Rules {
		if ruleNamed(newCfg, or.Name) || or.Scope != nr.Scope || !sameKeyParts(or.Key, nr.Key) {
			continue
		}
		return RuleChange{Rule: nr.Name, Kind: ChangeReset, Reasons: []string{
			fmt.Sprintf("renamed from %q: state is kept under the rule's name", or.Name)}}
	}
	return RuleChange{Rule: nr.Name, Kind: ChangeAdded, Reasons: []string{"starts empty"}}
}

// hasClientIP reports whether a key part reads the client address.
func hasClientIP(parts []config.KeyPart) bool {
	for _, p := range parts {
		if p.Source == config.SourceClientIP {
			return true
		}
	}
	return false
}

func ruleNamed(cfg *config.Config, name string) bool {
	for _, r := range cfg.Rules {
		if r.Name == name {
			return true
		}
	}
	return false
}

// compareRule compares one rule kept by name.
func compareRule(or, nr *config.Rule) RuleChange {
	c := RuleChange{Rule: nr.Name, Kind: ChangeKept}
	if or.Scope != nr.Scope {
		c.Kind = ChangeReset
		c.Reasons = append(c.Reasons, fmt.Sprintf("scope %s -> %s: the state is in %s, the rule now reads %s",
			or.Scope, nr.Scope, where(or.Scope), where(nr.Scope)))
		return c
	}
	if why := keyChange(or.Key, nr.Key); why != "" {
		c.Kind = ChangeReset
		c.Reasons = append(c.Reasons, why)
		return c
	}
	if why := paramsChange(or.Algorithm, nr.Algorithm); why != "" {
		c.Kind = ChangeConverted
		c.Reasons = append(c.Reasons, why)
	}
	notes, converted := overrideChanges(or, nr)
	if len(converted) > 0 && c.Kind == ChangeKept {
		c.Kind = ChangeConverted
	}
	c.Reasons = append(append(c.Reasons, converted...), notes...)
	return c
}

func where(s config.Scope) string {
	if s == config.ScopeGlobal {
		return "Redis"
	}
	return "this proxy's shared data"
}

// keyChange says why two rules' key parts build different descriptors for the same request,
// or "" when they build the same ones. on_duplicate does not change a descriptor (it decides
// which of a repeated header's values counts, or refuses the request).
func keyChange(old, cur []config.KeyPart) string {
	if len(old) != len(cur) {
		return fmt.Sprintf("key parts %s -> %s: clients count under the new parts' values, from a fresh state", keyString(old), keyString(cur))
	}
	for i := range old {
		o, n := old[i], cur[i]
		switch {
		case o.Source != n.Source || o.Name != n.Name || o.Value != n.Value:
			return fmt.Sprintf("key parts %s -> %s: clients count under the new parts' values, from a fresh state", keyString(old), keyString(cur))
		case o.IPv4Prefix != n.IPv4Prefix || o.IPv6Prefix != n.IPv6Prefix:
			return fmt.Sprintf("key[%d] prefixes ipv4 /%d, ipv6 /%d -> /%d, /%d: every client counts under another network",
				i, o.IPv4Prefix, o.IPv6Prefix, n.IPv4Prefix, n.IPv6Prefix)
		case o.HasDefault != n.HasDefault || o.Default != n.Default:
			return fmt.Sprintf("key[%d].default %s -> %s: requests without the part count under another key (or none)",
				i, defaultString(o), defaultString(n))
		}
	}
	return ""
}

// sameKeyParts reports whether two key part lists build the same descriptors.
func sameKeyParts(a, b []config.KeyPart) bool { return keyChange(a, b) == "" }

func keyString(parts []config.KeyPart) string {
	if len(parts) == 0 {
		return "[] (one key)"
	}
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = string(p.Source)
		if p.Name != "" {
			s[i] += " " + p.Name
		}
		if p.Value != "" {
			s[i] += " " + strconv.Quote(p.Value)
		}
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func defaultString(p config.KeyPart) string {
	if !p.HasDefault {
		return "none"
	}
	return strconv.Quote(p.Default)
}

// paramsChange lists the parameters a state records that differ, or "" when a state written
// under old is read as it is under cur. The capacity is compared, not burst as written
// (burst 0 means limit). An adaptive rule's admission state records only its window: its
// limit in force belongs to the controller, whose other parameters change nothing stored.
func paramsChange(old, cur algorithms.Config) string {
	var d []string
	add := func(name string, o, n any) {
		if fmt.Sprint(o) != fmt.Sprint(n) {
			d = append(d, fmt.Sprintf("%s %v -> %v", name, o, n))
		}
	}
	add("algorithm", algoName(old), algoName(cur))
	if old.Algorithm == algorithms.AlgAdaptive && cur.Algorithm == algorithms.AlgAdaptive {
		add("window", old.Window, cur.Window)
	} else {
		add("limit", old.Limit, cur.Limit)
		add("window", old.Window, cur.Window)
		if old.Capacity() != old.Limit || cur.Capacity() != cur.Limit {
			add("capacity", old.Capacity(), cur.Capacity())
		}
		add("max_delay", old.MaxDelay, cur.MaxDelay)
	}
	if len(d) == 0 {
		return ""
	}
	return strings.Join(d, ", ") + ": each client keeps what it used, at most the new capacity"
}

func algoName(c algorithms.Config) string {
	if c.Algorithm == algorithms.AlgSlidingWindow {
		v := c.Variant
		if v == "" {
			v = algorithms.VariantCounter
		}
		return c.Algorithm + " " + v
	}
	return c.Algorithm
}

// overrideChanges compares a rule's overrides. A key's state belongs to the rule and the key,
// whichever limit applies to it: an override only changes the parameters its clients are
// decided under. An override added, removed, re-spelt or given other parameters converts its
// clients' state to the parameters that now apply, without grant, when they differ from those
// it had; an unlimited override leaves its clients' state as it was, and they are decided from
// it, converted, when they are limited again. No override change resets a state.
//
// The parameters an added override's clients had are taken to be the rule's; a client that an
// override of the old configuration matched had that override's, and is converted from them
// just as well: a conversion never grants, whatever it converts from.
func overrideChanges(or, nr *config.Rule) (notes, converted []string) {
	tags := func(r *config.Rule) map[string]*config.Override {
		m := map[string]*config.Override{}
		for i := range r.Overrides {
			m[r.Overrides[i].Tag] = &r.Overrides[i]
		}
		return m
	}
	ot, nt := tags(or), tags(nr)
	var names []string
	for tag := range nt {
		names = append(names, tag)
	}
	for tag := range ot {
		if _, ok := nt[tag]; !ok {
			names = append(names, tag)
		}
	}
	sort.Strings(names)
	convert := func(what string, from, to algorithms.Config) {
		if why := paramsChange(from, to); why != "" {
			converted = append(converted, fmt.Sprintf("%s: %s", what, why))
		}
	}
	for _, tag := range names {
		o, n := ot[tag], nt[tag]
		switch {
		case o == nil && n.Unlimited:
			notes = append(notes, fmt.Sprintf("override %s added, unlimited: its clients are no longer limited, and keep their state for when they are again", overrideString(n)))
		case o == nil:
			convert(fmt.Sprintf("override %s added", overrideString(n)), or.Algorithm, n.Algorithm)
		case n == nil && o.Unlimited:
			converted = append(converted, fmt.Sprintf("override %s (unlimited) removed: its clients are limited again, from the state they had, converted without grant", overrideString(o)))
		case n == nil:
			convert(fmt.Sprintf("override %s removed, its clients back under the rule", overrideString(o)), o.Algorithm, nr.Algorithm)
		case n.Unlimited && !o.Unlimited:
			notes = append(notes, fmt.Sprintf("override %s made unlimited: its clients are no longer limited, and keep their state for when they are again", overrideString(n)))
		case o.Unlimited && !n.Unlimited:
			converted = append(converted, fmt.Sprintf("override %s limited again: its clients are decided from the state they had, converted without grant", overrideString(n)))
		case !n.Unlimited:
			convert(fmt.Sprintf("override %s", overrideString(n)), o.Algorithm, n.Algorithm)
		}
	}
	return notes, converted
}

func overrideString(o *config.Override) string {
	kind := "value"
	if o.Prefix {
		kind = "prefix"
	}
	return fmt.Sprintf("(key[%d] %s %q)", o.Part, kind, o.Value)
}
