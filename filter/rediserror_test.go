package filter

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
)

// Error replies of a real Redis, natively through a real webdis, on each kind of call the
// filter makes (the partition secret, a decision, a settlement): each is counted as a Redis
// error, not a malformed answer, and logged with Redis' message whole. Real messages are
// longer than a script's result: Redis appends the script's sha and line to its own text.

// relayed answers call c with webdis' answer at url at the fleet's instant, as answerAt does,
// and returns the error that package redis reads from that answer in full, which must be an
// error reply.
func (l *leaseVMs) relayed(t *testing.T, url string, c proxytest.HttpCalloutAttribute) *redis.Error {
	t.Helper()
	status, answer := postWebdis(t, url, l.timed(c.Body))
	l.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", fmt.Sprint(status)}}, nil, answer)
	// ParseSettle reads the error reply of any script call: it expects no rule's values.
	_, err := redis.ParseSettle(status, answer)
	e, ok := err.(*redis.Error)
	require.True(t, ok, "webdis answered %d %s: not an error reply", status, answer)
	return e
}

// requireRedisErrors checks that the fleet counted n Redis errors and no malformed answer,
// and that a warning carries e's message.
func (l *leaseVMs) requireRedisErrors(t *testing.T, n int, e *redis.Error) {
	t.Helper()
	require.EqualValues(t, n, l.counter("ratelimit_redis_errors_total"))
	require.Zero(t, l.counter("ratelimit_redis_malformed_total"))
	require.Contains(t, strings.Join(l.host.GetWarnLogs(), "\n"), e.Error())
}

func TestRedisErrorReplies(t *testing.T) {
	// The partition secret's script reads and writes with GET and SET: a user without them
	// gets the ACL error.
	t.Run("partition secret", func(t *testing.T) {
		srv := redistest.Start(t)
		loadScripts(srv)
		srv.MustDo("ACL", "SETUSER", "default", "-get", "-set")
		l := newSecretFleet(t, 1)
		id, c := l.startSecret(t, 0, "bob")
		e := l.relayed(t, srv.WebdisURL(), c)
		require.Contains(t, e.Message, "can't run this command")
		require.EqualValues(t, 429, l.host.GetSentLocalResponse(id).StatusCode, "failure_mode deny")
		l.host.CompleteHttpContext(id)
		l.requireRedisErrors(t, 1, e)
	})

	// A decision that writes while Redis cannot persist: MISCONF, whose message alone is
	// over 300 bytes. Redis' working directory is removed under it, so its background save
	// fails, and with a save point set it then refuses writes.
	t.Run("decision", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "rdb")
		require.NoError(t, os.Mkdir(dir, 0o700))
		srv := redistest.StartWith(t, redistest.Options{RedisArgs: []string{"--dir", dir}})
		loadScripts(srv)
		require.NoError(t, os.Remove(dir))
		srv.MustDo("CONFIG", "SET", "save", "3600 1")
		srv.MustDo("BGSAVE")
		require.Eventually(t, func() bool {
			info, _ := srv.MustDo("INFO", "persistence").(string)
			return strings.Contains(info, "rdb_bgsave_in_progress:0") && strings.Contains(info, "rdb_last_bgsave_status:err")
		}, 10*time.Second, 10*time.Millisecond, "the background save fails")
		l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{},
			`[{"name":"g","scope":"global","key":[{"source":"header","name":"x-k"}],"algorithm":"token_bucket","limit":5,"window":"1m"}]`), 1, 1)
		id := l.host.InitializeHttpContext()
		l.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, hdr("x-k", "bob")}, true)
		calls := l.host.GetCalloutAttributesFromContext(id)
		require.Len(t, calls, 1)
		e := l.relayed(t, srv.WebdisURL(), calls[0])
		require.True(t, strings.HasPrefix(e.Message, "MISCONF "), e.Message)
		require.EqualValues(t, 429, l.host.GetSentLocalResponse(id).StatusCode, "failure_mode deny")
		l.host.CompleteHttpContext(id)
		l.requireRedisErrors(t, 1, e)
	})

	// A settlement sets its id key with SET: a user without it gets the ACL error on each of
	// the settlement's three tries, and the settlement is then counted as failed with it.
	t.Run("settlement", func(t *testing.T) {
		srv := redistest.Start(t)
		loadScripts(srv)
		url := srv.WebdisURL()
		l := newGlobalFleet(t, usageGlobalRule(`"algorithm":"gcra","limit":1000,"window":"1h","burst":1000`, "reserve"), 1, 1)
		s := l.openGlobal(t, 0, url, "k")
		require.True(t, s.admitted)
		srv.MustDo("ACL", "SETUSER", "default", "-set")
		var e *redis.Error
		require.Equal(t, 1, l.end(t, s, 250, true, func(c proxytest.HttpCalloutAttribute) { e = l.relayed(t, url, c) }))
		require.Contains(t, e.Message, "can't run this command")
		require.EqualValues(t, 1, l.counter("ratelimit_redis_errors_total"))
		require.Zero(t, l.counter("ratelimit_redis_malformed_total"))
		for _, wait := range []int64{1e9, 2e9} {
			calls := l.tickSettlements(t, wait)
			require.Len(t, calls, 1)
			l.relayed(t, url, calls[0])
		}
		require.EqualValues(t, 1, l.counter("ratelimit_usage_settle_failures_total;rule=llm"))
		l.requireRedisErrors(t, 3, e)
	})
}
