package config

import (
	"strconv"
	"strings"
)

// Cost returns what req costs under this rule: a constant, or the cost header's value when
// that is a positive decimal integer no larger than Max, and Default when the header is
// absent. Any other value (not a number, zero, negative, a fraction, several values on one
// line or on several lines, or larger than Max) is charged Max: a client must never lower its
// own cost by sending garbage. The header should be set by a trusted component (an
// authorizer, or a filter that knows the work a request does); a client that can set it can
// only raise its cost, or omit it and pay Default. A component that adds the header after the
// client's own (Envoy's header options append by default) makes two lines, charged Max.
func (r *Rule) Cost(req Request) int64 {
	if r.CostSpec.Header == "" {
		return r.CostSpec.Constant
	}
	return r.CostSpec.headerCost(req)
}

// headerCost is Cost for a cost header, out of line so that Cost, small, is inlined: most
// rules have a constant cost.
func (cs *CostSpec) headerCost(req Request) int64 {
	v, ok := req.Header(cs.Header)
	if !ok {
		return cs.Default
	}
	// Header answers the first line only, as Envoy's single-value lookup does, so a request
	// that carries the header has its lines counted too: the filter reads the header map for
	// them (one host call, unless a key part has read it). A request without it costs nothing
	// more.
	if _, _, lines := req.HeaderLines(cs.Header); lines > 1 {
		return cs.Max
	}
	n, ok := parseCost(v, cs.Max)
	if !ok {
		return cs.Max
	}
	return n
}

// parseCost reads a cost header's value: a decimal integer from 1 to max (ParseDecimal).
func parseCost(s string, max int64) (int64, bool) {
	n, ok := ParseDecimal(s)
	return n, ok && n > 0 && n <= max
}

// DecimalCeiling is where ParseDecimal saturates: a well-formed number of that or more reads
// as DecimalCeiling, every smaller one exactly. It is above any cost, limit or usage max the
// configuration accepts, so a value too large for an int64 is charged as the largest, and
// eight of them still sum without overflow.
const DecimalCeiling = 1_000_000_000_000_000_000

// ParseDecimal reads a header's non-negative decimal integer: digits only, no sign, with
// spaces and tabs around them ignored; a number of DecimalCeiling or more (more than 18
// digits after leading zeros) reads as DecimalCeiling, ok. ok is false for anything that is
// not such a number. The value comes from a client or an upstream, so a bad one allocates
// nothing: it is checked before strconv reads it.
func ParseDecimal(s string) (int64, bool) {
	s = strings.Trim(s, " \t")
	if s == "" || digitsLen(s) != len(s) {
		return 0, false
	}
	if s = strings.TrimLeft(s, "0"); s == "" {
		return 0, true
	}
	if len(s) > 18 {
		return DecimalCeiling, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
