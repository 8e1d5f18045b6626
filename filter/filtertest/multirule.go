package filtertest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
)

// A MultiRuleCase is one configuration of a per-key rule and a per-route rule under 30
// requests with x-k: A, then one request for each of the keys B, C and D.
type MultiRuleCase struct {
	Name  string
	Rules string // the rules array
	// AllowedA is how many of the 30 requests with key A pass; DeniedBy the rule that denies
	// the others ("" when none is denied).
	AllowedA int
	DeniedBy string
	// RouteLeft is the per-route rule's RateLimit remaining after the request with key D.
	RouteLeft int
}

// MultiRuleCases: a key rule (fixed window, 2 per hour, keyed on x-k) and a route rule (20 per hour, no key)
// apply to every request; either order, either scope of the key rule, and the key rule as a
// shadow rule.
var MultiRuleCases = func() []MultiRuleCase {
	perKey := func(scope string, cont, shadow bool) string {
		return fmt.Sprintf(`{"name":"per-key","continue":%v,"shadow":%v,"key":[{"source":"header","name":"x-k"}],
			"algorithm":"fixed_window","limit":2,"window":"1h","scope":%q}`, cont, shadow, scope)
	}
	perRoute := func(cont bool) string {
		return fmt.Sprintf(`{"name":"per-route","continue":%v,"algorithm":"fixed_window","limit":20,"window":"1h","scope":"global"}`, cont)
	}
	return []MultiRuleCase{
		// 2 of A pass, 28 are denied by per-key and cost per-route nothing, so B, C and D
		// pass and per-route has counted 5.
		{"key rule first", "[" + perKey("global", true, false) + "," + perRoute(false) + "]", 2, "per-key", 15},
		{"route rule first", "[" + perRoute(true) + "," + perKey("global", false, false) + "]", 2, "per-key", 15},
		// A local key rule decides first; its denial sends no callout at all.
		{"local key rule, global route rule", "[" + perKey("local", true, false) + "," + perRoute(false) + "]", 2, "per-key", 15},
		// A shadow key rule denies nothing: all 20 of per-route's allowance goes to A, its
		// denials do not stop per-route from counting, and B, C and D are denied by per-route.
		{"shadow key rule", "[" + perKey("global", true, true) + "," + perRoute(false) + "]", 20, "per-route", 0},
	}
}()

// Run runs the case through do, which sends a request with the given x-k and returns its
// outcome.
func (tc MultiRuleCase) Run(t *testing.T, do func(key string) Outcome) {
	t.Helper()
	allowed := 0
	for i := range 30 {
		o := do("A")
		if o.Status == 0 {
			allowed++
			continue
		}
		if o.Status != 429 || !strings.Contains(o.Body, `"rule":"`+tc.DeniedBy+`"`) {
			t.Fatalf("request %d: %d %s, want 429 from %s", i, o.Status, o.Body, tc.DeniedBy)
		}
	}
	if allowed != tc.AllowedA {
		t.Fatalf("%d requests with key A passed, want %d", allowed, tc.AllowedA)
	}
	var last Outcome
	for _, k := range []string{"B", "C", "D"} {
		last = do(k)
		if tc.DeniedBy == "per-route" {
			if last.Status != 429 || !strings.Contains(last.Body, `"rule":"per-route"`) {
				t.Fatalf("key %s: %d %s, want 429 from per-route", k, last.Status, last.Body)
			}
			continue
		}
		if last.Status != 0 {
			t.Fatalf("key %s must pass: the denials of A charged per-route nothing (%d %s)", k, last.Status, last.Body)
		}
	}
	if want := fmt.Sprintf(`"per-route";r=%d;`, tc.RouteLeft); !strings.Contains(last.Headers["ratelimit"], want) {
		t.Fatalf("RateLimit %q, want it to contain %s", last.Headers["ratelimit"], want)
	}
}

// RedisTime reads Redis' clock, the one the scripts decide with.
func RedisTime(t testing.TB, srv *redistest.Server) time.Time {
	t.Helper()
	v, ok := srv.MustDo("TIME").([]any)
	if !ok || len(v) != 2 {
		t.Fatalf("TIME answered %v", v)
	}
	sec, err1 := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return time.Unix(sec, usec*1000)
}

// WaitForHourWindow makes sure the clock-aligned hour of Redis' clock does not end in the
// next ten seconds, so fixed windows of an hour do not reset in the middle of a test.
func WaitForHourWindow(t *testing.T, srv *redistest.Server) {
	t.Helper()
	ns := RedisTime(t, srv).UnixNano()
	if left := time.Duration(int64(time.Hour) - ns%int64(time.Hour)); left < 10*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
}
