package config

import (
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Durations use Go's time.ParseDuration syntax ("300ms", "1.5s", "1m30s", "24h") plus a
// "d" unit for days of 24 hours, because day-long quotas are common and "24h" is easy to
// mistype as "24". A bare number ("10") is rejected rather than guessed: seconds and
// milliseconds are both plausible readings, and a wrong guess is a limit off by 1000x.
// The parser is the config's own, so that "d" can appear anywhere in a sequence ("1d12h")
// and every error says precisely what is wrong.

// durationUnit returns the length of a unit in nanoseconds: a switch, where a map would be
// built in every VM's _initialize.
func durationUnit(unit string) (uint64, bool) {
	switch unit {
	case "ns":
		return uint64(time.Nanosecond), true
	case "us",
		"µs", // U+00B5 micro sign
		"μs": // U+03BC Greek small letter mu
		return uint64(time.Microsecond), true
	case "ms":
		return uint64(time.Millisecond), true
	case "s":
		return uint64(time.Second), true
	case "m":
		return uint64(time.Minute), true
	case "h":
		return uint64(time.Hour), true
	case "d":
		return uint64(24 * time.Hour), true
	}
	return 0, false
}

// notADuration is parseDuration's message for text that is not a duration at all.
func notADuration(orig string) string {
	return quote(orig) + ` is not a duration (want e.g. "500ms", "1m30s", "1d")`
}

// parseDuration parses a duration the way the config does: Go syntax plus "d" (24h). It
// returns the duration, or a non-empty message describing the problem without a JSON path
// (Parse adds the path).
func parseDuration(orig string) (time.Duration, string) {
	if d, ok := simpleDuration(orig); ok {
		return d, ""
	}
	return parseDurationFull(orig)
}

// simpleDuration parses the form nearly every configured duration has, an integer and one
// unit ("1s", "500ms", "1d"), and reports false for anything else, so that parseDurationFull
// is compiled only for configurations that need it (TestSimpleDurationAgrees).
func simpleDuration(s string) (time.Duration, bool) {
	i, v := 0, uint64(0)
	for ; i < len(s) && i < 18 && isDigit(s[i]); i++ {
		v = v*10 + uint64(s[i]-'0')
	}
	if i == 0 || i == len(s) || isDigit(s[i]) {
		return 0, false
	}
	unit, ok := durationUnit(s[i:])
	if !ok {
		return 0, false
	}
	if v > uint64(1<<63-1)/unit {
		return 0, false
	}
	return time.Duration(v * unit), true
}

// parseDurationFull is parseDuration for any input.
func parseDurationFull(orig string) (time.Duration, string) {
	s := orig
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "" {
		return 0, notADuration(orig)
	}
	if isNumberLike(s) {
		return 0, quote(orig) + " has no unit"
	}
	const max = 1<<63 - 1
	var total uint64
	for s != "" {
		// A term: digits, an optional fraction, then a unit up to the next number.
		n := digitsLen(s)
		if n < len(s) && s[n] == '.' {
			n += 1 + digitsLen(s[n+1:])
		}
		if n == 0 || s[:n] == "." {
			return 0, notADuration(orig)
		}
		if n < len(s) && s[n] == '.' {
			return 0, quote(orig) + " has a number with two decimal points"
		}
		u := n
		for u < len(s) && s[u] != '.' && !isDigit(s[u]) {
			u++
		}
		if u == n {
			return 0, quote(orig) + " ends in a number with no unit"
		}
		unit, ok := durationUnit(s[n:u])
		if !ok {
			return 0, quote(orig) + " has unknown unit " + strconv.Quote(s[n:u]) + " (want ns, us, ms, s, m, h or d)"
		}
		d, ok := termNanos(s[:n], unit)
		s = s[u:]
		if !ok || d > max-total {
			return 0, quote(orig) + " is too large"
		}
		total += d
	}
	if neg {
		return -time.Duration(total), ""
	}
	return time.Duration(total), ""
}

// termNanos returns a number ("90", "1.5", ".25") of units in nanoseconds, truncated to a
// whole nanosecond, in integer arithmetic: the whole part times the unit, plus the fraction's
// digits times the unit divided by 10 to the number of digits. Digits past the 19th are
// dropped: together they are worth less than a nanosecond of any unit (a day is under 10^14
// ns), so the result is at most 1 ns short. It reports false when the value does not fit in
// an int64.
func termNanos(number string, unit uint64) (uint64, bool) {
	whole, frac, _ := strings.Cut(number, ".")
	var v uint64
	if whole != "" {
		w, err := strconv.ParseUint(whole, 10, 64)
		hi, lo := bits.Mul64(w, unit)
		if err != nil || hi != 0 || lo > 1<<63-1 {
			return 0, false
		}
		v = lo
	}
	if len(frac) > 19 {
		frac = frac[:19]
	}
	if frac != "" {
		f, _ := strconv.ParseUint(frac, 10, 64) // digits only, at most 19: it fits
		pow := uint64(1)
		for range frac {
			pow *= 10
		}
		hi, lo := bits.Mul64(f, unit) // f < pow, so hi < pow and the quotient fits
		q, _ := bits.Div64(hi, lo, pow)
		if q > 1<<63-1-v {
			return 0, false
		}
		v += q
	}
	return v, true
}

// digitsLen returns the number of leading decimal digits of s.
func digitsLen(s string) int {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isNumberLike reports whether s is made only of digits and dots: a number without its unit.
func isNumberLike(s string) bool {
	digits := false
	for i := 0; i < len(s); i++ {
		switch {
		case isDigit(s[i]):
			digits = true
		case s[i] != '.':
			return false
		}
	}
	return digits
}
