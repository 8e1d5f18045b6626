package config

import (
	"slices"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// UsageSpec is a usage cost: what a request takes is known only from its response (the tokens
// an LLM API reports). The request is decided with a reservation (the CostSpec's constant or
// header, see Rule.Cost); when its stream ends the rule's state is settled by usage minus
// reservation: a refund, or a debt (see algorithms.Settle).
type UsageSpec struct {
	Header string // the response header holding the usage (lower case), or "" for Pointers
	// Pointers are JSON pointers (RFC 6901) into the response body, each as its reference
	// tokens, unescaped; the values they find are summed. Texts are the pointers as configured.
	Pointers  [][]string
	Texts     []string
	Max       int64  // what one request is charged at most
	OnMissing string // what a request whose usage never arrives is charged: UsageMissing*
}

// What a request whose usage never arrives is charged (UsageSpec.OnMissing).
const (
	UsageMissingReserve = "reserve"
	UsageMissingMax     = "max"
)

// Limits of a usage cost: the pointers one cost sums, and one pointer's text and reference
// tokens (the body scanner keeps one path of at most that depth per stream).
const (
	MaxUsagePointers   = 8
	MaxUsagePointerLen = 256
	maxPointerTokens   = 16
)

// MissingCharge returns what a request whose usage never arrived is charged, given its
// reservation.
func (u *UsageSpec) MissingCharge(reserve int64) int64 {
	if u.OnMissing == UsageMissingMax {
		return u.Max
	}
	return reserve
}

// Charge returns what a request that reported usage is charged: usage, at most Max.
func (u *UsageSpec) Charge(usage int64) int64 { return min(max(usage, 0), u.Max) }

var (
	usageCostFields = []string{"reserve", "usage", "max", "on_missing"}
	usageFields     = []string{"header", "json"}
)

// usageCost reads {reserve, usage, max, on_missing} at path: the reservation into the
// returned CostSpec's constant or header fields, the rest into its Usage.
func (p *parser) usageCost(path string, n *node) (CostSpec, bool) {
	f, _ := p.object(path, n, usageCostFields...)
	u := &UsageSpec{OnMissing: UsageMissingReserve}
	cs := CostSpec{Constant: 1, Usage: u}
	valid := need(p, f, "max", ": it bounds what one request is charged, and the overshoot while streams are open",
		1, algorithms.LimitCeiling, &u.Max, p.integer)
	if rn, rpath := f.get("reserve"); rn == nil {
		p.add(rpath, "required: the units a request holds until its usage is known")
		valid = false
	} else if r, ok := p.cost(rpath, rn); ok {
		cs.Constant, cs.Header, cs.Default, cs.Max = r.Constant, r.Header, r.Default, r.Max
		if top := max(r.Constant, r.Max); u.Max > 0 && top > u.Max {
			at := rpath
			if r.Header != "" {
				at = joinKey(rpath, "max")
			}
			p.add(at, "must be <= the cost's max ("+strconv.FormatInt(u.Max, 10)+"), got "+strconv.FormatInt(top, 10))
			valid = false
		}
	} else {
		valid = false
	}
	if un, upath := f.get("usage"); un == nil {
		p.add(upath, `required: {"header": name} or {"json": [pointers]}`)
		valid = false
	} else {
		valid = p.usageSource(upath, un, u) && valid
	}
	valid = optEnum(p, f, "on_missing", &u.OnMissing, UsageMissingReserve, UsageMissingMax) && valid
	return cs, valid
}

// usageSource reads {header} or {json: [pointers]} into u.
func (p *parser) usageSource(path string, n *node, u *UsageSpec) bool {
	f, ok := p.object(path, n, usageFields...)
	if !ok {
		return false
	}
	hn, hpath := f.get("header")
	jn, jpath := f.get("json")
	switch {
	case hn != nil && jn != nil:
		p.add(path, `set one of "header" and "json", not both`)
		return false
	case hn != nil:
		var ok bool
		u.Header, ok = p.headerName(hpath, hn)
		return ok
	case jn == nil:
		p.add(path, `needs "header" (a response header) or "json" (pointers into the response body)`)
		return false
	}
	elems, ok := p.array(jpath, jn, 1, MaxUsagePointers)
	if !ok {
		return false
	}
	for i, e := range elems {
		epath := joinIndex(jpath, i)
		s, ok := p.str(epath, e, MaxUsagePointerLen)
		if !ok {
			return false
		}
		tokens, msg := parsePointer(s)
		if msg != "" {
			p.add(epath, quote(s)+" "+msg)
			return false
		}
		u.Pointers = append(u.Pointers, tokens)
		u.Texts = append(u.Texts, s)
	}
	return true
}

// parsePointer splits a JSON pointer (RFC 6901) into its reference tokens, unescaped by
// jsontext, or returns what is wrong with it. The whole document ("") is no usage.
func parsePointer(s string) ([]string, string) {
	p := jsontext.Pointer(s)
	switch {
	case s == "" || s[0] != '/':
		return nil, `is no JSON pointer to a value: it must start with "/" (for example "/usage/total_tokens")`
	case !p.IsValid():
		return nil, `has a "~" that is not "~0" or "~1"`
	}
	tokens := slices.Collect(p.Tokens())
	if len(tokens) > maxPointerTokens {
		return nil, "has more than " + strconv.Itoa(maxPointerTokens) + " reference tokens"
	}
	return tokens, ""
}

// checkUsage checks a usage cost against the rule's algorithm, once the limiter is built (see
// checkAlgorithm): the algorithms that cannot give units back or take them beyond their
// capacity refuse it (adaptive among them), and the reservation must fit the capacity.
func checkUsage(r *Rule) (field, msg string) {
	if err := algorithms.CheckUsage(r.Algorithm, r.CostSpec.Usage.Max); err != nil {
		field, msg := algorithmError(err)
		if field == "max" {
			return "cost.max", msg
		}
		return "cost", "a usage cost is not for this rule: " + field + ": " + msg
	}
	return checkCost(r, "cost.reserve")
}
