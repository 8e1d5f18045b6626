package config

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// MaxOverrides bounds the overrides of one rule: each has a key table of its own (see
// Override), and a list meant for a few tiers or special keys never needs more.
const MaxOverrides = 64

var overrideFields = []string{"part", "exact", "prefix", "limit", "window", "burst", "unlimited"}

// Override gives the requests whose key part has a given value (or starts with a prefix) a
// limit of their own, as envoyproxy/ratelimit's per-descriptor-value limits do: API-key
// tiers, or an unlimited internal key. The rule's algorithm and everything else stay; only
// limit, window and burst change. A request matches at most one override of a rule: an exact
// value first, then the longest matching prefix (Rule.OverrideFor).
//
// A key's state belongs to the rule and the key, whichever limit applies to it: the override
// only changes the parameters it is decided under. A state written under other parameters (the
// rule's, or another override's, before a configuration change) is converted like after any
// parameter change (package algorithms, "Configuration changes"), so adding, removing or
// re-spelling an override never grants a key allowance.
type Override struct {
	Part   int    // the index in the rule's Key of the part whose value is compared
	Value  string // the exact value, or the prefix when Prefix is set
	Prefix bool
	// Unlimited overrides are never limited: the rule does not apply to their requests (they
	// count as allowed and get no rate-limit headers).
	Unlimited bool
	// Algorithm and Limiter are the rule's, with the override's limit, window and burst.
	Algorithm algorithms.Config
	Limiter   algorithms.Limiter
	// Tag identifies the override: "!" then "=" (exact) or "^" (prefix), then, for a part
	// other than the first, the part's index and "|", then the value length-prefixed like a
	// key part. Two overrides with one tag match the same requests (a duplicate).
	Tag string
}

// OverrideFor returns the index in r.Overrides of the override that applies to a request
// with key (as AppendKey built it), or -1. It does not allocate.
func (r *Rule) OverrideFor(key []byte) int {
	if len(r.Overrides) == 0 {
		return -1
	}
	best := -1
	for i := range r.Overrides {
		o := &r.Overrides[i]
		v, ok := keyPartValue(key, o.Part)
		if !ok {
			continue
		}
		if !o.Prefix {
			if string(v) == o.Value {
				return i // exact values win over prefixes
			}
			continue
		}
		if best < 0 && strings.HasPrefix(string(v), o.Value) {
			// Prefixes are sorted longest first at parse time (see overrides), so the first
			// one that matches is the longest.
			best = i
		}
	}
	return best
}

// keyPartValue returns the value of part i of a key built by AppendKey ("3:abc1:d").
func keyPartValue(key []byte, i int) ([]byte, bool) {
	for pos, part := 0, 0; pos < len(key); part++ {
		n, colon := 0, pos
		for colon < len(key) && key[colon] >= '0' && key[colon] <= '9' && n <= len(key) {
			n = n*10 + int(key[colon]-'0')
			colon++
		}
		if colon == pos || colon >= len(key) || key[colon] != ':' || n > len(key)-colon-1 {
			return nil, false
		}
		start := colon + 1
		if part == i {
			return key[start : start+n], true
		}
		pos = start + n
	}
	return nil, false
}

// overrides reads a rule's overrides, after its algorithm: an override is the rule's
// algorithm with other parameters.
func (p *parser) overrides(path string, n *node, r *Rule) {
	elems, ok := p.array(path, n, 1, MaxOverrides)
	if !ok {
		return
	}
	switch {
	case len(r.Key) == 0:
		p.add(path, `needs a "key": an override gives key values their own limit`)
		return
	case r.Algorithm.Algorithm == algorithms.AlgAdaptive:
		p.add(path, "not supported by adaptive: its controller tunes one limit per rule")
		return
	case r.Mode == ModeShape:
		p.add(path, `not supported with mode "shape": the rule's queue drains at one rate`)
		return
	case r.Limiter == nil:
		return // the rule's own parameters are invalid and already reported
	}
	seen := map[string]string{} // the path of each tag
	var out []Override
	for i, e := range elems {
		epath := joinIndex(path, i)
		if o, ok := p.override(epath, e, r); ok {
			if prev, dup := seen[o.Tag]; dup {
				p.add(epath, "duplicate of "+prev)
				continue
			}
			seen[o.Tag] = epath
			out = append(out, o)
		}
	}
	sortPrefixesLongestFirst(out)
	r.Overrides = out
}

// sortPrefixesLongestFirst orders the prefix overrides longest first (equal lengths in the
// configured order) within the positions the prefixes hold, so that OverrideFor's first
// matching prefix is the longest; the exact overrides keep their places. (A comparator that
// calls an exact override equal to every prefix would let one between two prefixes stop the
// longer from moving ahead.)
func sortPrefixesLongestFirst(out []Override) {
	var at []int // the positions of the prefixes
	var prefixes []Override
	for i := range out {
		if out[i].Prefix {
			at = append(at, i)
			prefixes = append(prefixes, out[i])
		}
	}
	slices.SortStableFunc(prefixes, func(a, b Override) int { return len(b.Value) - len(a.Value) })
	for k, i := range at {
		out[i] = prefixes[k]
	}
}

// override reads one override.
func (p *parser) override(path string, n *node, r *Rule) (Override, bool) {
	f, ok := p.object(path, n, overrideFields...)
	if !ok {
		return Override{}, false
	}
	o := Override{Algorithm: r.Algorithm}
	valid := opt(f, "part", 0, len(r.Key)-1, &o.Part, p.intField)
	en, epath := f.get("exact")
	pn, ppath := f.get("prefix")
	switch {
	case en != nil && pn != nil:
		p.add(path, `give one of "exact" or "prefix", not both`)
		valid = false
	case en != nil:
		o.Value, ok = p.str(epath, en, maxStringLen)
		if ok && valid && r.Key[o.Part].Source == SourceClientIP {
			var msg string
			if o.Value, msg = r.Key[o.Part].clientIPValue(o.Value); msg != "" {
				p.add(epath, msg)
				ok = false
			}
		}
		valid = valid && ok
	case pn != nil:
		o.Value, ok = p.str(ppath, pn, maxStringLen)
		o.Prefix = true
		if ok && o.Value == "" {
			p.add(ppath, "must not be empty (an empty prefix matches every value: change the rule's limit instead)")
			ok = false
		}
		valid = valid && ok
	default:
		p.add(path, `one of "exact" or "prefix" is required`)
		valid = false
	}
	if un, upath := f.get("unlimited"); un != nil {
		o.Unlimited, ok = p.boolean(upath, un)
		valid = valid && ok
	}
	ac := &o.Algorithm
	spec, _ := algorithms.SpecOf(ac.Algorithm)
	set := false // a limit, window or burst is set
	for _, field := range []string{"limit", "window", "burst"} {
		fn, fpath := f.get(field)
		switch {
		case fn == nil:
			continue
		case o.Unlimited:
			p.add(fpath, `not used with "unlimited": true`)
			valid = false
		case field == "window":
			valid = opt(f, field, algorithms.MinWindow, algorithms.MaxWindow, &ac.Window, p.duration) && valid
		case field == "burst" && !spec.Accepts(algorithms.FieldBurst):
			p.add(fpath, "not used by "+ac.Algorithm)
			valid = false
		case field == "burst":
			valid = opt(f, field, 1, algorithms.LimitCeiling, &ac.Burst, p.integer) && valid
		default:
			valid = opt(f, field, 1, algorithms.LimitCeiling, &ac.Limit, p.integer) && valid
		}
		set = true
	}
	if !o.Unlimited && !set && valid {
		p.add(path, `needs "limit", "window" or "burst", or "unlimited": true`)
		valid = false
	}
	if !valid {
		return o, false
	}
	if !f.has("burst") {
		// An override's burst defaults to its own limit, as a rule's does: the rule's burst
		// was sized for the rule's limit.
		ac.Burst = 0
	}
	tag := "!="
	if o.Prefix {
		tag = "!^"
	}
	if o.Part > 0 {
		tag += strconv.Itoa(o.Part) + "|" // a part's length prefix ends in ':', not '|'
	}
	o.Tag = string(appendPart([]byte(tag), o.Value))
	if o.Unlimited {
		return o, true
	}
	// The override is the rule with other parameters: algorithms validates it as it does the
	// rule (checkAlgorithm), cost included, and reports against the override's path.
	probe := *r
	probe.Algorithm = o.Algorithm
	if fpath, msg := checkAlgorithm(&probe); msg != "" {
		p.add(path+"."+fpath, msg)
		return o, false
	}
	o.Algorithm, o.Limiter = probe.Algorithm, probe.Limiter
	return o, true
}

// clientIPValue returns the value a client_ip part holds for the requests an exact override
// names: an address in canonical form ("2001:DB8::1", "::ffff:192.0.2.1", "fe80::1%eth0" and
// "192.0.2.1/32" name the clients "2001:db8::1", "192.0.2.1", "fe80::1" and "192.0.2.1", as
// ClientIP reads them), or the network the part masks its family's addresses to
// ("192.0.2.0/24"). A value no key of the part can hold would never match: it is refused with
// the reason, and with the value to write where there is one.
func (kp *KeyPart) clientIPValue(v string) (string, string) {
	if kp.HasDefault && v == kp.Default {
		return v, ""
	}
	bits := -1 // the network's length; -1 for an address
	ip, err := netip.ParseAddr(v)
	if pfx, perr := netip.ParsePrefix(v); perr == nil {
		ip, bits, err = pfx.Addr(), pfx.Bits(), nil
	}
	if err != nil || bits >= 0 && ip.Is4In6() {
		return "", "never matches: a client_ip part's value is an IP address, or the network its prefix masks addresses to"
	}
	if bits == ip.BitLen() {
		bits = -1 // a network of one address is the address
	}
	if bits < 0 {
		ip = ip.Unmap().WithZone("")
	}
	family := "IPv6"
	if ip.Is4() {
		family = "IPv4"
	}
	want := string(kp.appendIP(nil, ip))
	switch masks := kp.prefixBits(ip) < ip.BitLen(); {
	case !masks && bits >= 0:
		n := strconv.Itoa(bits)
		return "", "never matches: the part keys whole " + family + " addresses (" + strings.ToLower(family) +
			"_prefix " + n + " on the part would key /" + n + " networks)"
	case masks && (bits < 0 || netip.PrefixFrom(ip, bits).Masked().String() != want):
		return "", "never matches: the part keys " + family + " clients by their /" + strconv.Itoa(kp.prefixBits(ip)) +
			" network: write " + strconv.Quote(want)
	}
	return want, ""
}
