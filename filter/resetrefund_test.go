package filter

import (
	"fmt"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestResetGivesLeaseUnitsBack: y's lease admits a request, which then waits for Redis on x;
// the client resets the stream before the answer. The request never reached the upstream, so
// the unit y's lease gave it goes back to the lease, as when another rule denies the request
// (refundLeases): it is still debited and within the lease's ttl. Otherwise it would be
// neither spent by an admitted request nor counted as dropped.
func TestResetGivesLeaseUnitsBack(t *testing.T) {
	srv := redistest.Start(t)
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			loadScripts(srv)
			l := newGlobalFleet(t, leasedY(parts, 1000, 0), 1, 1)
			url := srv.WebdisURL()
			ok, _ := l.doRelayed(t, 0, url, hdr("x-k", "A"), hdr("x-y", "late"))
			require.True(t, ok)
			held := l.vms[0].rules[1].lease.held[yKey]
			require.NotNil(t, held)
			require.EqualValues(t, 9, held.units)

			n := l.resetMidCall(t, 0, url, hdr("x-k", "B"), hdr("x-y", "late"))
			require.Equal(t, 1, n, "x's call only: y's lease admitted the request")
			require.Same(t, held, l.vms[0].rules[1].lease.held[yKey])
			require.EqualValues(t, 9, held.units, "the reset request's unit is back in y's lease")
		})
	}
}
