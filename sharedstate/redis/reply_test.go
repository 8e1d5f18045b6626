package redis_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// FuzzParseRepliesSameAsGeneral: ParseReplies decodes the answers webdis writes in a loop of its
// own and leaves every other body to the general parser; whatever the body, the two must agree
// on the instant, the commit, the error and every answer.
func FuzzParseRepliesSameAsGeneral(f *testing.F) {
	for _, s := range []string{
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,1]}`, `{"EVAL":[7,8,0,9007199254740991,0,2,0,3,5,0,1,20,19,0,10,0]}`,
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,2,0,20,0,9,10,0]}`, `{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,21,9,10,0]}`,
		`{"EVALSHA":[9223372035,999999999,0,9007199254740991,0,2,0,999999999999999999,5,0,0,20,0,9,10,0]}`,
		`{"EVALSHA":[9223372036,0,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,1]}`, `{"EVALSHA":[0,1000000000,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,1]}`,
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,1] }`, `{"EVALSHA":[7,08,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,1]}`,
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,1,]}`, `{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10]}`,
		`{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,-9,10,1]}`, `{"EVALSHA":[7,8,1,9007199254740991,1,2,1,0,5,0,0,20,0,9,10,1]}}`,
		`{"EVALSHA":[7,8,1,9007199254740990,1,2,1,0,5,0,0,20,0,9,10,1]}`,
		`{"EVALSHA":[false,"NOSCRIPT No matching script."]}`, ``,
	} {
		f.Add(200, []byte(s))
	}
	f.Add(503, []byte(nil))
	a := mustRule(f, algorithms.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Hour})
	b := mustRule(f, algorithms.Config{Algorithm: "gcra", Limit: 20, Window: time.Hour})
	items := []redis.Item{{Rule: a, Key: []byte("a"), GiveBack: 3}, {Rule: b, Key: []byte("b"), Shadow: true}}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		var got, want [2]redis.Answer
		now, committed, err := redis.ParseReplies(status, body, redis.TestCallID, items, got[:])
		wantNow, wantCommitted, wantErr := redis.ParseRepliesGeneral(status, body, redis.TestCallID, items, want[:])
		if now != wantNow || committed != wantCommitted || fmt.Sprint(err) != fmt.Sprint(wantErr) ||
			errors.Is(err, redis.ErrMalformed) != errors.Is(wantErr, redis.ErrMalformed) ||
			errors.Is(err, redis.ErrUnavailable) != errors.Is(wantErr, redis.ErrUnavailable) ||
			err == nil && got != want {
			t.Fatalf("%d %q: %d %v %v %+v; the general parser %d %v %v %+v",
				status, body, now, committed, err, got, wantNow, wantCommitted, wantErr, want)
		}
	})
}
