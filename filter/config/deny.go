package config

import "strconv"

// placeholder identifies what a body template part renders.
type placeholder uint8

const (
	phNone       placeholder = iota // literal text
	phRule                          // %RULE%: the rule name
	phRetryAfter                    // %RETRY_AFTER%: whole seconds until a retry can succeed
)

// placeholderNamed returns the placeholder a %NAME% stands for (a switch, not a map: see
// durationUnit).
func placeholderNamed(name string) (placeholder, bool) {
	switch name {
	case "%RULE%":
		return phRule, true
	case "%RETRY_AFTER%":
		return phRetryAfter, true
	}
	return phNone, false
}

// bodyPart is a literal or a placeholder of a compiled body template.
type bodyPart struct {
	lit string
	ph  placeholder
}

// compileBody splits a body template into literals and placeholders once, at configure
// time, so that rendering a denial is a few appends. Anything that looks like a
// placeholder (%UPPER_CASE%) but is not a known one is an error: a typo such as
// %RETRYAFTER% would otherwise be sent to clients verbatim. Other percent signs ("100%")
// are literal text.
func compileBody(s string) ([]bodyPart, string) {
	var parts []bodyPart
	lit := 0 // start of the pending literal
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		j := i + 1
		for j < len(s) && (s[j] >= 'A' && s[j] <= 'Z' || s[j] == '_') {
			j++
		}
		if j == i+1 || j >= len(s) || s[j] != '%' {
			continue
		}
		name := s[i : j+1]
		ph, ok := placeholderNamed(name)
		if !ok {
			return nil, "unknown placeholder " + strconv.Quote(name) + " (known: %RULE%, %RETRY_AFTER%)"
		}
		if lit < i {
			parts = append(parts, bodyPart{lit: s[lit:i]})
		}
		parts = append(parts, bodyPart{ph: ph})
		lit = j + 1
		i = j
	}
	if lit < len(s) {
		parts = append(parts, bodyPart{lit: s[lit:]})
	}
	return parts, ""
}

// AppendBody renders the denial body into dst and returns the extended slice. %RULE% is
// replaced by rule and %RETRY_AFTER% by retryAfterSeconds (negative values render as 0).
// Rule names are restricted to [A-Za-z0-9_.-], so embedding one in a JSON string or HTML
// needs no escaping. It does not allocate when dst has enough capacity.
func (d *Deny) AppendBody(dst []byte, rule string, retryAfterSeconds int64) []byte {
	for _, p := range d.body {
		switch p.ph {
		case phNone:
			dst = append(dst, p.lit...)
		case phRule:
			dst = append(dst, rule...)
		case phRetryAfter:
			dst = strconv.AppendInt(dst, max(retryAfterSeconds, 0), 10)
		}
	}
	return dst
}
