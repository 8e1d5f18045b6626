package config

import (
	"strconv"
	"time"
)

// Durations use Go's time.ParseDuration syntax ("300ms", "1.5s", "1m30s", "24h") plus a
// "d" unit for days of 24 hours, because day-long quotas are common and "24h" is easy to
// mistype as "24". A bare number ("10") is rejected rather than guessed: seconds and
// milliseconds are both plausible readings, and a wrong guess is a limit off by 1000x.
// The parser is written out here, not delegated to time.ParseDuration, so that "d" can
// appear anywhere in a sequence ("1d12h") and every error says precisely what is wrong.

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

// notADuration is parseDuration's message for text that is not a duration at all (out of
// line).
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
	const max = uint64(1<<63 - 1)
	var total uint64
	for s != "" {
		if !(s[0] == '.' || isDigit(s[0])) {
			return 0, notADuration(orig)
		}
		var v uint64 // the integer part
		i := 0
		for ; i < len(s) && isDigit(s[i]); i++ {
			d := uint64(s[i] - '0')
			if v > (max-d)/10 {
				return 0, quote(orig) + " is too large"
			}
			v = v*10 + d
		}
		pre := i > 0
		s = s[i:]
		// The fractional part. Digits beyond what int64 nanoseconds can use are dropped,
		// as time.ParseDuration does.
		var f uint64
		scale := 1.0
		post := false
		if s != "" && s[0] == '.' {
			s = s[1:]
			j := 0
			overflow := false
			for ; j < len(s) && isDigit(s[j]); j++ {
				d := uint64(s[j] - '0')
				if overflow || f > (max-d)/10 {
					overflow = true
					continue
				}
				f = f*10 + d
				scale *= 10
			}
			post = j > 0
			s = s[j:]
		}
		if !pre && !post {
			return 0, notADuration(orig)
		}
		// The unit: everything up to the next number.
		j := 0
		for ; j < len(s) && s[j] != '.' && !isDigit(s[j]); j++ {
		}
		if j == 0 {
			return 0, quote(orig) + " ends in a number with no unit"
		}
		unit, ok := durationUnit(s[:j])
		if !ok {
			return 0, quote(orig) + " has unknown unit " + strconv.Quote(s[:j]) + " (want ns, us, ms, s, m, h or d)"
		}
		s = s[j:]
		if v > max/unit {
			return 0, quote(orig) + " is too large"
		}
		v *= unit
		if f > 0 {
			v += uint64(float64(f) * (float64(unit) / scale))
			if v > max {
				return 0, quote(orig) + " is too large"
			}
		}
		total += v
		if total > max {
			return 0, quote(orig) + " is too large"
		}
	}
	if neg {
		return -time.Duration(total), ""
	}
	return time.Duration(total), ""
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
