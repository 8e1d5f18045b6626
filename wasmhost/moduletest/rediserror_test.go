package moduletest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/fakellm"
	"github.com/stretchr/testify/require"
)

// requireRedisErrorLogged checks that h counted errors Redis error replies and no malformed
// answer, and logged a line with want and Redis' message to its end: the ACL error's ends with
// the script's line, "on @user_script:<line>.".
func requireRedisErrorLogged(t *testing.T, h *wasmhost.Host, errors int64, want string) {
	t.Helper()
	require.Equal(t, errors, redisMetric(h, "ratelimit_redis_errors_total"))
	require.Zero(t, redisMetric(h, "ratelimit_redis_malformed_total"))
	var lines []string
	for _, e := range h.Logs() {
		if strings.Contains(e.Message, want) {
			lines = append(lines, e.Message)
		}
	}
	require.NotEmpty(t, lines, "no log line with %q", want)
	require.Regexp(t, `redis: ERR The user executing the script can't run this command or subcommand script: [0-9a-f]{40}, on @user_script:\d+\.`, lines[0])
}

// TestRedisErrorRepliesWasm: the compiled module against a real Redis whose user lacks a
// command a script runs (GET and SET for the partition secret, SET for a settlement's id key):
// Redis' ACL error is counted and logged as a Redis error, with its message, on each call.
// filter's TestRedisErrorReplies runs the same natively, with a decision's error too.
func TestRedisErrorRepliesWasm(t *testing.T) {
	t.Parallel()
	t.Run("partition secret", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		loadScripts(t, srv)
		srv.MustDo("ACL", "SETUSER", "default", "-get", "-set")
		rules := `[{"name":"g","key":[{"source":"header","name":"x-user"}],"algorithm":"gcra","limit":5,"window":"1m","scope":"global"}]`
		h := newGlobalHost(t, globalConfig(redisOpts{Partitions: 2}, rules), srv.WebdisURL(), 1)
		o, _ := doTimed(t, h, hdr("x-user", "u"))
		require.Equal(t, 429, o.Status, "failure_mode deny")
		requireRedisErrorLogged(t, h, 1, "redis failed 1 times in a row")
	})
	t.Run("settlement", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		loadScripts(t, srv)
		srv.MustDo("ACL", "SETUSER", "default", "-set")
		h := newGlobalHost(t, globalUsageConfig("gcra", 3000, 100, 400, "reserve"), srv.WebdisURL(), 1)
		rep := fakellm.Reply{Shape: fakellm.OpenAI, Stream: true, Input: 100, Output: 150, Words: 3}
		res, err := h.Do(context.Background(), llmRequest("openai", "k", rep))
		require.NoError(t, err)
		require.Nil(t, res.Local, "the reservation is admitted")
		// The settlement's three tries: at once, then 1 s and 2 s after each failure.
		require.Eventually(t, func() bool {
			v, _ := h.Metric("ratelimit_usage_settle_failures_total;rule=openai")
			return v == 1
		}, 10*time.Second, 10*time.Millisecond)
		requireRedisErrorLogged(t, h, 3, "a usage cost's settlement was not written")
	})
}
