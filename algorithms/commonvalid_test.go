package algorithms

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// commonValid (the valid path's check) and commonError (the messages) agree on every
// configuration: random ones drawn around each boundary commonError checks, for every
// algorithm and both limit ceilings.
func TestCommonValidAgreesWithCommonError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vs ...int64) int64 { return vs[rng.IntN(len(vs))] }
	dur := func(vs ...time.Duration) time.Duration { return vs[rng.IntN(len(vs))] }
	names := []string{AlgTokenBucket, AlgLeakyBucket, AlgSlidingWindow, AlgFixedWindow, AlgGCRA, AlgAdaptive, "unknown"}
	valid := 0
	for i := range 200_000 {
		c := Config{
			Algorithm: names[rng.IntN(len(names))],
			Limit:     pick(-1, 0, 1, 10, LogLimitCeiling, LogLimitCeiling+1, LimitCeiling, LimitCeiling+1),
			Window:    dur(0, MinWindow-1, MinWindow, time.Second, time.Second+1, MaxWindow, MaxWindow+time.Millisecond),
			Burst:     pick(-1, 0, 0, 0, 5, LimitCeiling, LimitCeiling+1),
			Variant:   []string{"", "", "", VariantCounter, VariantLog, "x"}[rng.IntN(6)],
			MaxDelay:  dur(0, 0, 0, time.Millisecond),
		}
		if rng.IntN(4) == 0 {
			switch rng.IntN(9) {
			case 0:
				c.MinLimit = 1
			case 1:
				c.MaxLimit = 1
			case 2:
				c.TargetLatency = time.Millisecond
			case 3:
				c.ErrorThreshold = 0.5
			case 4:
				c.ErrorThreshold = math.NaN()
			case 5:
				c.AdjustInterval = time.Second
			case 6:
				c.MinSamples = 1
			case 7:
				c.IncreaseStep = 1
			case 8:
				c.DecreaseFactor = 0.5
			}
		}
		maxLimit := LimitCeiling
		if i%2 == 1 {
			maxLimit = LogLimitCeiling
		}
		spec, _ := SpecOf(c.Algorithm)
		ok, err := commonValid(c, int64(maxLimit), spec), commonError(c, int64(maxLimit), spec)
		if ok != (err == nil) {
			t.Fatalf("%+v (max %d): commonValid %v, commonError %v", c, int64(maxLimit), ok, err)
		}
		if ok {
			valid++
		}
	}
	if valid < 1000 {
		t.Fatalf("only %d valid configurations drawn: the test does not reach the valid path", valid)
	}
}
