package algorithms

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// decisionDigests runs fixed random sequences (time going backwards now and then, sizes above
// the capacity included) through every configuration of allConfigs, feeding each returned
// state back, and digests every decision field. The state bytes are not digested: their
// encoding is allowed to change, the decisions are not.
func decisionDigests() string {
	var out strings.Builder
	for ci, c := range allConfigs() {
		l, err := New(c)
		if err != nil {
			panic(err)
		}
		h := sha256.New()
		r := rand.New(rand.NewPCG(uint64(ci), 2026))
		for seq := 0; seq < 20; seq++ {
			var state []byte
			for _, cl := range randomCalls(r, c, 300, int64(c.Window)/2) {
				var d Decision
				d, state = l.AllowN(state, cl.at, cl.n)
				fmt.Fprintf(h, "%+v|%v\n", d, l.Idle(state, cl.at+int64(time.Duration(seq)*ms)))
			}
		}
		if a, ok := l.(*Adaptive); ok {
			// The controller's limit changes between calls: counts carry over.
			var state []byte
			for _, cl := range randomCalls(r, c, 2000, int64(c.Window)/2) {
				var d Decision
				d, state = a.AllowNLimit(state, cl.at, cl.n, 1+r.Int64N(15))
				fmt.Fprintf(h, "%+v\n", d)
			}
		}
		fmt.Fprintf(&out, "%s %x\n", name(c), h.Sum(nil))
	}
	return out.String()
}

// TestDecisionsUnchanged checks that, with the configuration unchanged, every decision
// (Allowed, Limit, Remaining, RetryAfter, ResetAfter, Delay) and every Idle answer is
// bit-for-bit as in testdata/decisions-v1.golden, this function's digests of the decisions of
// limiters writing the v1 encoding (no recorded parameters): recording them changes no decision.
func TestDecisionsUnchanged(t *testing.T) {
	want, err := os.ReadFile("testdata/decisions-v1.golden")
	if err != nil {
		t.Fatal(err)
	}
	if got := decisionDigests(); got != string(want) {
		t.Fatalf("decisions differ from the v1 code:\n got %s\nwant %s", got, want)
	}
}
