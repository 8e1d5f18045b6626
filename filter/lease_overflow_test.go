package filter

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestGlobalLeaseNeverOnOverflowKey: a global rule's overflow key limits every new client that
// finds the key bound reached as one client. 100 such clients, one request each, at batch 10:
// a lease there would debit a whole batch per client and admit limit/batch of them; they must
// get what the exact decision gives them, and the VM holds no lease on the overflow key.
func TestGlobalLeaseNeverOnOverflowKey(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		admitted := map[string]int{}
		for _, lease := range []string{"", `,"lease":{"batch":10,"ttl":"1m"}`} {
			name := map[bool]string{true: "exact", false: "leased"}[lease == ""]
			t.Run(fmt.Sprintf("partitions=%d/%s", parts, name), func(t *testing.T) {
				srv.MustDo("FLUSHALL")
				loadScripts(srv)
				rules := `[{"name":"y","scope":"global","key":[{"source":"header","name":"x-y"}],"algorithm":"fixed_window","limit":100,"window":"1h","max_keys":4` + lease + `}]`
				l := newGlobalFleet(t, filtertest.GlobalConfig(filtertest.RedisOpts{Partitions: parts}, rules), 1, 1)
				url := srv.WebdisURL()
				// max_keys 4: twenty clients fill every partition's key set.
				for i := range 20 {
					ok, _ := l.doRelayed(t, 0, url, hdr("x-y", fmt.Sprint("fill", i)))
					require.True(t, ok)
				}
				overflows := func() uint64 {
					n, _ := l.host.GetCounterMetric(statName("ratelimit_key_overflow_total", "y"))
					return n
				}
				before := overflows()
				for i := range 100 {
					if ok, _ := l.doRelayed(t, 0, url, hdr("x-y", fmt.Sprint("new", i))); ok {
						admitted[name]++
					}
				}
				require.EqualValues(t, 100, overflows()-before, "every new client is decided on the overflow key")
				if lease != "" {
					for k, h := range l.vms[0].rules[0].lease.held {
						if strings.Contains(k, "new") {
							require.Zero(t, h.units, "no units held for %q, decided on the overflow key", k)
						}
					}
				}
			})
		}
		require.Equal(t, admitted["exact"], admitted["leased"], "partitions %d", parts)
		require.Positive(t, admitted["exact"])
	}
}
