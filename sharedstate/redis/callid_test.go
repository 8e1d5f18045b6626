package redis_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// TestAnswerToAnotherCallIsMalformed: the script echoes each call's id, so the answer of one
// call handed to another (as webdis does after a client went away mid-call) is malformed even
// when it is a well-formed answer of the same rule and key; an id the script cannot hold
// exactly is refused by the script itself.
func TestAnswerToAnotherCallIsMalformed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	rule := mustRule(t, algorithms.Config{Algorithm: "fixed_window", Limit: 5, Window: time.Hour})
	items := []redis.Item{{Rule: rule, Key: []byte("callid"), N: 1}}
	out := make([]redis.Answer, 1)
	for _, id := range []int64{0, 41, redis.MaxCallID} {
		status, body := c.post(redis.AppendEvalSHA(nil, id, items))
		if _, _, err := redis.ParseReplies(status, body, id, items, out); err != nil || !out[0].Decision.Allowed {
			t.Fatalf("id %d: %v %+v (%s)", id, err, out[0], body)
		}
		for _, other := range []int64{id + 1, id - 1, id ^ 1<<52} {
			if _, _, err := redis.ParseReplies(status, body, other, items, out); !errors.Is(err, redis.ErrMalformed) {
				t.Errorf("the answer to call %d taken as call %d's: %v", id, other, err)
			}
		}
	}
	for _, id := range []int64{-1, redis.MaxCallID + 1} {
		status, body := c.post(redis.AppendEvalSHA(nil, id, items))
		if _, _, err := redis.ParseReplies(status, body, id, items, out); !errors.Is(err, redis.ErrRedis) {
			t.Errorf("id %d: %v (%s), want the script's bad-arguments error", id, err, body)
		}
	}
}
