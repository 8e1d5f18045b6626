package moduletest

import (
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
)

// The compiled module logs Redis failures as the README says: the first in a row, then every
// power of two of them (filter's TestRedisFailuresLoggedFirstThenPowersOfTwo runs the same
// natively, with the breaker too).
func TestGlobalWasmRedisFailuresLoggedFirstThenPowersOfTwo(t *testing.T) {
	t.Parallel()
	rules := `[{"name":"g","key":[{"source":"header","name":"x-user"}],"algorithm":"gcra","limit":5,"window":"1m","scope":"global"}]`
	h := newGlobalHost(t, globalConfig(redisOpts{FailureMode: "allow"}, rules), redistest.GarbageServer(t, 503, nil), 1)
	for range 20 {
		if o, _ := doTimed(t, h, hdr("x-user", "u")); o.Status != 0 {
			t.Fatalf("failure_mode allow: %+v", o)
		}
	}
	var got []string
	for _, e := range h.Logs() {
		if strings.Contains(e.Message, "redis failed") {
			got = append(got, e.Message)
		}
	}
	want := []string{"1", "2", "4", "8", "16"}
	if len(got) != len(want) {
		t.Fatalf("%d lines for 20 failures, want failures %v: %q", len(got), want, got)
	}
	for i, n := range want {
		if !strings.Contains(got[i], "redis failed "+n+" times in a row") {
			t.Errorf("line %d: %q, want failure %s", i, got[i], n)
		}
	}
}
