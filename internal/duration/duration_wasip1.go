//go:build wasip1 && !timeduration

package duration

// Duration is the elapsed time between two instants as an int64 nanosecond count, as
// time.Duration is, without linking package time into the module.
type Duration int64

// The common durations, with time's values.
const (
	Nanosecond  Duration = 1
	Microsecond          = 1000 * Nanosecond
	Millisecond          = 1000 * Microsecond
	Second               = 1000 * Millisecond
	Minute               = 60 * Second
	Hour                 = 60 * Minute
)

// String returns the duration as time.Duration's String does, for example "72h3m0.5s".
func (d Duration) String() string { return Format(int64(d)) }
