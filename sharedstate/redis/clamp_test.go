package redis

import (
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/stretchr/testify/require"
)

// A well-formed answer whose durations no limiter can produce (here 2^63-1 ns) is clamped to
// algorithms.MaxExact, the bound every limiter keeps its durations under, instead of reaching
// callers that round or add to it.
func TestParseReplyClampsDurations(t *testing.T) {
	r, err := ParseReply(200, []byte(`{"EVALSHA":[1764504000,0,0,9007199254740991,0,5,0,9223372036854775807,9223372036854775807,0]}`))
	require.NoError(t, err)
	require.Equal(t, time.Duration(algorithms.MaxExact), r.Decision.RetryAfter)
	require.Equal(t, time.Duration(algorithms.MaxExact), r.Decision.ResetAfter)
	r, err = ParseReply(200, []byte(`{"EVALSHA":[1764504000,0,0,9007199254740991,0,5,0,2500000000,60000000000,0]}`))
	require.NoError(t, err)
	require.Equal(t, 2500*time.Millisecond, r.Decision.RetryAfter, "a sane duration is untouched")
	require.Equal(t, time.Minute, r.Decision.ResetAfter)
}
