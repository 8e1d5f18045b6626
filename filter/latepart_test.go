package filter

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
	"github.com/stretchr/testify/require"
)

// TestLateAnswersFeedTheirPartitionsBreaker: with redis.partitions 4 a reset request's two
// rules are called in two partitions; rule a's call fails late (503) and rule b's succeeds
// late. Each answer reaches the breaker of its own call's partition: a's partition opens
// (threshold 1) and b's stays closed, so the next request skips Redis for a only, and b's
// call is sent as before. An answer fed to another partition's breaker, or to the one
// breaker of an unpartitioned client, would open b's partition too or none.
func TestLateAnswersFeedTheirPartitionsBreaker(t *testing.T) {
	srv := redistest.Start(t)
	loadScripts(srv)
	rules := `[{"name":"a","scope":"global","continue":true,"key":[{"source":"header","name":"x-a"}],"algorithm":"token_bucket","limit":100,"window":"1m"},` +
		`{"name":"b","scope":"global","key":[{"source":"header","name":"x-b"}],"algorithm":"token_bucket","limit":100,"window":"1m"}]`
	l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: 4, Failures: 1, Cooldown: "10s",
		FailureMode: "allow"}, rules), 1, 1)
	secret := fleetSecret
	// Keys of a and b in different partitions: a's descriptor is "1:A" (x-a: A).
	pa := redis.Partition(&secret, []byte("1:A"), 4)
	kb := ""
	for i := range 100 {
		if k := fmt.Sprint(i); redis.Partition(&secret, []byte(fmt.Sprintf("%d:%s", len(k), k)), 4) != pa {
			kb = k
			break
		}
	}
	require.NotEmpty(t, kb)
	metric := func(name string) uint64 {
		n, _ := l.host.GetCounterMetric(name)
		return n
	}
	open := func() uint64 {
		n, _ := l.host.GetGaugeMetric("ratelimit_redis_breaker_open")
		return n
	}
	headers := [][2]string{hdr("x-a", "A"), hdr("x-b", kb)}
	id, calls := l.startReset(t, 0, headers...)
	require.Len(t, calls, 2)
	for _, c := range calls {
		if bytes.Contains(c.Body, []byte("%7Brl%3Aa%3A")) {
			l.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "503"}}, nil, nil)
		} else {
			l.answerAt(t, srv.WebdisURL(), c)
		}
	}
	l.host.CompleteHttpContext(id)
	require.EqualValues(t, 1, metric("ratelimit_redis_unavailable_total"), "a's late failure is counted once")
	require.EqualValues(t, 1, open(), "and opens a breaker")
	c := l.vms[0].redis
	for p := range c.parts {
		require.Equal(t, p == pa, c.parts[p].openUntil != 0, "partition %d (a's: %d)", p, pa)
	}

	l.now += int64(time.Millisecond)
	ok, n := l.doRelayed(t, 0, srv.WebdisURL(), headers...)
	require.True(t, ok, "failure_mode allow")
	require.Equal(t, 1, n, "b's call only: a's partition is open")
	require.EqualValues(t, 1, metric("ratelimit_redis_skipped_total"))
}
