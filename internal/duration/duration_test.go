package duration

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// durations returns the values the comparisons run on: every unit boundary and its
// neighbours, both signs, the int64 extremes, and random values of every magnitude.
func durations() []int64 {
	vs := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, math.MaxInt64 - 1}
	for _, u := range []int64{1, 1e3, 1e6, 1e9, 60e9, 3600e9, 86400e9} {
		for _, m := range []int64{1, 2, 9, 10, 59, 60, 61, 99, 100, 999, 1000, 1001, 1500} {
			if m > math.MaxInt64/u {
				continue
			}
			for _, d := range []int64{-1, 0, 1} {
				vs = append(vs, u*m+d, -(u*m + d))
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		v := int64(r.Uint64() >> r.IntN(64))
		vs = append(vs, v, -v)
	}
	return vs
}

// Format, the code behind the wasip1 Duration's String, prints every value as
// time.Duration.String does: configuration messages stay byte-identical in the module.
func TestFormatMatchesTime(t *testing.T) {
	for _, v := range durations() {
		if got, want := Format(v), time.Duration(v).String(); got != want {
			t.Fatalf("Format(%d) = %q, time says %q", v, got, want)
		}
	}
}

// Duration's String and constants are time's in either build (natively they are time's own;
// on wasip1 this checks the defined type's: cmd/wasmbench's TestDurationInWasmAsTime runs it
// there).
func TestDurationAsTime(t *testing.T) {
	units := []struct {
		d    Duration
		want int64
	}{{Nanosecond, 1}, {Microsecond, 1e3}, {Millisecond, 1e6}, {Second, 1e9}, {Minute, 60e9}, {Hour, 3600e9}}
	for _, u := range units {
		if int64(u.d) != u.want {
			t.Errorf("unit %d, want %d", int64(u.d), u.want)
		}
	}
	for _, v := range durations() {
		if got, want := Duration(v).String(), Format(v); got != want {
			t.Fatalf("Duration(%d).String() = %q, want %q", v, got, want)
		}
	}
}
