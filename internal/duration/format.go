// Package duration is the product's duration type: time.Duration natively, and on wasip1 an
// int64 type of its own with the same constants and the one method the filter uses (String),
// so that the compiled module does not link package time.
//
// Package time costs every Wasm VM's start on Envoy's V8, which compiles each function with
// TurboFan on its first call: time links syscall, whose initialisers query the stdio flags,
// the preopened directories and the environment, and internal/godebug, about 60 functions
// and 27 KB of code compiled and run in every VM's _initialize (docs/BENCHMARKS.md, "Start-up,
// seventh pass"). The filter needs none of it: it reads the clock through abi.WallClockNanos
// and only does arithmetic on durations and prints a few in configuration messages.
//
// Natively Duration is an alias of time.Duration, so the product's native tests and every
// caller outside the module keep passing time.Second and time.Duration values unchanged. So
// it is on wasip1 with the build tag timeduration, for the test binaries of the product's
// packages compiled to Wasm (cmd/wasmbench; `make vet`), whose tests do the same; the module
// itself is built without the tag.
// The wasip1 String formats with Format below, which TestFormatMatchesTime compares with
// time.Duration.String natively on many values.
package duration

// Format returns d nanoseconds as time.Duration's String does ("1h2m3.5s", "1.5ms", "0s").
// The code is Go 1.26's time.Duration.format (BSD licence, see LICENSE), unchanged but for
// working on an int64.
func Format(d int64) string {
	var arr [32]byte
	n := format(d, &arr)
	return string(arr[n:])
}

// format formats the representation of d into the end of buf and returns the offset of the
// first character.
func format(d int64, buf *[32]byte) int {
	// Largest time is 2540400h10m10.000000000s
	w := len(buf)

	u := uint64(d)
	neg := d < 0
	if neg {
		u = -u
	}

	if u < uint64(second) {
		// Special case: if duration is smaller than a second,
		// use smaller units, like 1.2ms
		var prec int
		w--
		buf[w] = 's'
		w--
		switch {
		case u == 0:
			buf[w] = '0'
			return w
		case u < uint64(microsecond):
			// print nanoseconds
			prec = 0
			buf[w] = 'n'
		case u < uint64(millisecond):
			// print microseconds
			prec = 3
			// U+00B5 'µ' micro sign == 0xC2 0xB5
			w-- // Need room for two bytes.
			copy(buf[w:], "µ")
		default:
			// print milliseconds
			prec = 6
			buf[w] = 'm'
		}
		w, u = fmtFrac(buf[:w], u, prec)
		w = fmtInt(buf[:w], u)
	} else {
		w--
		buf[w] = 's'

		w, u = fmtFrac(buf[:w], u, 9)

		// u is now integer seconds
		w = fmtInt(buf[:w], u%60)
		u /= 60

		// u is now integer minutes
		if u > 0 {
			w--
			buf[w] = 'm'
			w = fmtInt(buf[:w], u%60)
			u /= 60

			// u is now integer hours
			// Stop at hours because days can be different lengths.
			if u > 0 {
				w--
				buf[w] = 'h'
				w = fmtInt(buf[:w], u)
			}
		}
	}

	if neg {
		w--
		buf[w] = '-'
	}

	return w
}

// The units in nanoseconds, untyped so that format serves both builds.
const (
	microsecond = 1000
	millisecond = 1000 * microsecond
	second      = 1000 * millisecond
)

// fmtFrac formats the fraction of v/10**prec (e.g., ".12345") into the
// tail of buf, omitting trailing zeros. It omits the decimal
// point too when the fraction is 0. It returns the index where the
// output bytes begin and the value v/10**prec.
func fmtFrac(buf []byte, v uint64, prec int) (nw int, nv uint64) {
	// Omit trailing zeros up to and including decimal point.
	w := len(buf)
	print := false
	for i := 0; i < prec; i++ {
		digit := v % 10
		print = print || digit != 0
		if print {
			w--
			buf[w] = byte(digit) + '0'
		}
		v /= 10
	}
	if print {
		w--
		buf[w] = '.'
	}
	return w, v
}

// fmtInt formats v into the tail of buf.
// It returns the index where the output begins.
func fmtInt(buf []byte, v uint64) int {
	w := len(buf)
	if v == 0 {
		w--
		buf[w] = '0'
	} else {
		for v > 0 {
			w--
			buf[w] = byte(v%10) + '0'
			v /= 10
		}
	}
	return w
}
