//go:build !wasip1 || timeduration

package duration

import "time"

// Duration is time.Duration natively: native code and tests pass time's values unchanged.
// Test binaries of the product's packages built for wasip1 (cmd/wasmbench, `make vet`) use
// this file too, with the build tag timeduration, because their tests pass time's values.
type Duration = time.Duration

// The common durations, time's own natively.
const (
	Nanosecond  = time.Nanosecond
	Microsecond = time.Microsecond
	Millisecond = time.Millisecond
	Second      = time.Second
	Minute      = time.Minute
	Hour        = time.Hour
)
