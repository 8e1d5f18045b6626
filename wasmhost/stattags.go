package wasmhost

import (
	"regexp"
	"sort"
	"strings"
)

// TagSpecifier is one of Envoy's stats_config.stats_tags: a tag (Prometheus label) that
// Envoy's tag extraction takes out of stat names. With Regex, the expression is searched in the
// stat's full name ("wasmcustom.<name>" for a Wasm plugin's stat); its first capture group is
// removed from the name, and the tag's value is the second capture group when the expression
// has one, else the first (Envoy's TagExtractorImpl). Without Regex, FixedValue is the tag's
// value on every stat.
type TagSpecifier struct {
	Name       string
	Regex      *regexp.Regexp
	FixedValue string
}

// wasmNamespace is the prefix Envoy gives every stat a Wasm plugin defines; its Prometheus
// output strips it again (the namespace is registered as custom).
const wasmNamespace = "wasmcustom."

// SetStatsTags makes the store's Prometheus output extract tags as Envoy does with these
// stats_tags (see TagSpecifier). Names in /stats, Metric and Histogram stay the full names.
func (s *MetricStore) SetStatsTags(tags []TagSpecifier) {
	t := append([]TagSpecifier(nil), tags...)
	s.tags.Store(&t)
}

// label is one extracted tag.
type label struct{ name, value string }

// extractTags returns the tag-extracted name of a stat (Prometheus-sanitized, without the
// wasmcustom namespace) and its tags in specifier order.
func extractTags(name string, tags []TagSpecifier) (string, []label) {
	full := wasmNamespace + name
	remove := make([]bool, len(full))
	var labels []label
	for _, t := range tags {
		if t.Regex == nil {
			labels = append(labels, label{t.Name, t.FixedValue})
			continue
		}
		loc := t.Regex.FindStringSubmatchIndex(full)
		if loc == nil || len(loc) < 4 || loc[2] < 0 {
			continue
		}
		value := full[loc[2]:loc[3]]
		if len(loc) >= 6 && loc[4] >= 0 {
			value = full[loc[4]:loc[5]]
		}
		for i := loc[2]; i < loc[3]; i++ {
			remove[i] = true
		}
		labels = append(labels, label{t.Name, value})
	}
	var b strings.Builder
	for i := 0; i < len(full); i++ {
		if !remove[i] {
			b.WriteByte(full[i])
		}
	}
	return sanitizeName(strings.TrimPrefix(b.String(), wasmNamespace)), labels
}

// sanitizeName makes a stat name a Prometheus metric name as Envoy's Prometheus output does:
// every character other than [a-zA-Z0-9_:] becomes '_', and a name that starts with a digit
// gets a leading '_'.
func sanitizeName(n string) string {
	b := []byte(n)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == ':') {
			b[i] = '_'
		}
	}
	if len(b) > 0 && b[0] >= '0' && b[0] <= '9' {
		return "_" + string(b)
	}
	return string(b)
}

// formatLabels renders labels and extra (name, value pairs, such as le) as a Prometheus label
// set, values escaped.
func formatLabels(labels []label, extra ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	first := true
	add := func(k, v string) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v))
		b.WriteByte('"')
	}
	for _, l := range labels {
		add(l.name, l.value)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		add(extra[i], extra[i+1])
	}
	b.WriteByte('}')
	return b.String()
}

// family is one Prometheus metric family: the stats whose tag-extracted names are equal.
type family struct {
	name    string
	typ     uint32
	members []familyMember
}

type familyMember struct {
	labels []label
	m      *metric
}

// families groups the metrics by tag-extracted name and type, sorted by name, each family's
// members sorted by their label sets.
func families(all []*metric, tags []TagSpecifier) []*family {
	byKey := map[string]*family{}
	var out []*family
	for _, mt := range all {
		name, labels := extractTags(mt.name, tags)
		key := name + "\x00" + string(rune('0'+mt.typ))
		f := byKey[key]
		if f == nil {
			f = &family{name: name, typ: mt.typ}
			byKey[key] = f
			out = append(out, f)
		}
		f.members = append(f.members, familyMember{labels, mt})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].name < out[j].name })
	for _, f := range out {
		sort.SliceStable(f.members, func(i, j int) bool {
			return formatLabels(f.members[i].labels) < formatLabels(f.members[j].labels)
		})
	}
	return out
}
