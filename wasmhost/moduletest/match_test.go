package moduletest

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Against the compiled module with the host's header map: a repeated
// x-api-key (one entry per line, as Envoy keeps it) is refused and counted; a repeated
// user-agent, which Envoy folds into one "a,b" value before the filter sees it (and sends
// upstream as that one value), is keyed on that value and not refused.
func TestDuplicateKeyHeaderWasm(t *testing.T) {
	t.Parallel()
	d := newWasm(t, `{"rules":[
		{"name":"ua","continue":true,"key":[{"source":"header","name":"user-agent"}],"algorithm":"fixed_window","limit":1,"window":"1m"},
		{"name":"per-key","key":[{"source":"header","name":"x-api-key"}],"algorithm":"fixed_window","limit":3,"window":"1m"}]}`,
		wasmOptions{})
	for i := range 10 {
		got := d.Do(t, t0, step{Headers: [][2]string{hdr("x-api-key", "rnd"+strconv.Itoa(i)), hdr("x-api-key", "real")}})
		require.Equal(t, 400, got.Status, "request %d", i)
		require.Contains(t, got.Body, `"header":"x-api-key"`)
	}
	require.EqualValues(t, 10, hostMetric(t, d.host, "ratelimit_requests_total;rule=per-key;decision=duplicate_header"))
	require.Zero(t, hostMetric(t, d.host, "ratelimit_requests_total;rule=per-key;decision=allowed"), "10 of 10 refused, none counted")

	folded := step{Headers: [][2]string{hdr("user-agent", "a"), hdr("x-api-key", "k"), hdr("user-agent", "b")}}
	got := d.Do(t, t0, folded)
	require.Zero(t, got.Status, "%v", got)
	require.Equal(t, `"ua";r=0;t=60, "per-key";r=2;t=60`, got.Headers["ratelimit"])
	got = d.Do(t, t0, step{Headers: [][2]string{hdr("user-agent", "a,b"), hdr("x-api-key", "k")}})
	require.Equal(t, 429, got.Status, "two user-agent lines and one line a,b are the same key")
	require.Zero(t, hostMetric(t, d.host, "ratelimit_requests_total;rule=ua;decision=duplicate_header"))
	require.Zero(t, d.host.Stats().Traps)
}

// A shadow rule's repeated key header is counted once, in duplicate_header, and not also in
// skipped: the rule's decisions add up to the requests it saw.
func TestShadowDuplicateKeyHeaderCountedOnceWasm(t *testing.T) {
	t.Parallel()
	d := newWasm(t, `{"rules":[
		{"name":"dry","shadow":true,"key":[{"source":"header","name":"x-user"}],"algorithm":"fixed_window","limit":5,"window":"1m"}]}`,
		wasmOptions{})
	got := d.Do(t, t0, step{Headers: [][2]string{hdr("x-user", "u1"), hdr("x-user", "u2")}})
	require.Zero(t, got.Status, "a shadow rule never refuses: %v", got)
	require.EqualValues(t, 1, hostMetric(t, d.host, "ratelimit_requests_total;rule=dry;decision=duplicate_header"))
	require.Zero(t, hostMetric(t, d.host, "ratelimit_requests_total;rule=dry;decision=skipped"))
}
