package filtertest

import (
	"strconv"
	"strings"
	"testing"
)

// LongestWaitRules are three global rules that all deny a client's second request at once:
// "day", a shadow rule that would deny for a day, "second" (1 per second) and "hour" (1 per
// hour). The denial must state the longest wait among the enforced rules, the hour's, not
// the first denying rule's second or the shadow rule's day (CheckLongestWait).
const LongestWaitRules = `[
	{"name":"day","continue":true,"shadow":true,"algorithm":"gcra","limit":1,"window":"24h","scope":"global"},
	{"name":"second","continue":true,"algorithm":"gcra","limit":1,"window":"1s","scope":"global"},
	{"name":"hour","algorithm":"gcra","limit":1,"window":"1h","scope":"global"}]`

// CheckLongestWait sends two requests through do at once (the first admitted) and checks that
// the second is denied by the rule "hour" with a Retry-After of about an hour.
func CheckLongestWait(t *testing.T, do func() Outcome) {
	t.Helper()
	if o := do(); o.Status != 0 {
		t.Fatalf("first request: %d %s, want it admitted", o.Status, o.Body)
	}
	o := do()
	if o.Status != 429 || !strings.Contains(o.Body, `"rule":"hour"`) {
		t.Fatalf("second request: %d %s, want 429 from hour", o.Status, o.Body)
	}
	ra, err := strconv.Atoi(o.Headers["retry-after"])
	if err != nil || ra < 3590 || ra > 3600 {
		t.Fatalf("Retry-After %q, want the hour rule's wait (3590 to 3600 s), not the second's or the shadow day's", o.Headers["retry-after"])
	}
}
