package filter

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/stretchr/testify/require"
)

// A key header's duplicate check reads its lines from the full header map before the key is
// built; Header then answers from those lines (Envoy's single-value lookup returns the first
// line) instead of calling the host again. The header is removed from the host's map between
// the two reads: a second host call would see it gone.
func TestHeaderAfterLinesCallsNoHost(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"r","key":[{"source":"header","name":"x-tenant"}],"algorithm":"token_bucket","limit":10,"window":"1s"}]}`)
	id := d.host.InitializeHttpContext()
	d.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/"}, {"x-tenant", "acme"}}, true)
	defer d.host.CompleteHttpContext(id)

	var r request
	first, _, n := r.HeaderLines("x-tenant")
	require.Equal(t, "acme", first)
	require.Equal(t, 1, n)
	require.NoError(t, abi.RemoveHttpRequestHeader("x-tenant"))
	v, ok := r.Header("x-tenant")
	require.True(t, ok)
	require.Equal(t, "acme", v, "answered from the lines already read")

	// The host's map did change: a request that has not read the lines sees the header gone,
	// so the assertion above would fail if Header called the host.
	var fresh request
	_, ok = fresh.Header("x-tenant")
	require.False(t, ok)
	// An absent header read as lines is absent for Header too.
	_, _, n = fresh.HeaderLines("x-other")
	require.Zero(t, n)
	_, ok = fresh.Header("x-other")
	require.False(t, ok)
}

// Once the whole header map has been read (for a key header's lines), every other header read
// of the request is answered from it: :method, :path, a condition's header and
// X-Forwarded-For (its lines joined). The headers are removed from the host's map after the
// map was read: an answer that called the host again would see them gone.
func TestHeadersAfterMapCallNoHost(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"r","key":[{"source":"header","name":"x-tenant"}],"algorithm":"token_bucket","limit":10,"window":"1s"}]}`)
	id := d.host.InitializeHttpContext()
	d.host.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", "/a?b=c"}, {"x-tenant", "acme"},
		{"x-forwarded-for", "1.1.1.1, 2.2.2.2"}, {"x-cond", "yes"}, {"x-forwarded-for", "3.3.3.3"}}, true)
	defer d.host.CompleteHttpContext(id)

	var r request
	first, _, n := r.HeaderLines("x-tenant")
	require.Equal(t, "acme", first)
	require.Equal(t, 1, n)
	for _, name := range []string{":method", ":path", "x-cond", "x-forwarded-for"} {
		require.NoError(t, abi.RemoveHttpRequestHeader(name))
	}
	require.Equal(t, "POST", r.Method())
	require.Equal(t, "/a?b=c", r.Path())
	v, ok := r.Header("x-cond")
	require.True(t, ok)
	require.Equal(t, "yes", v)
	v, ok = r.Header("x-forwarded-for")
	require.True(t, ok)
	require.Equal(t, "1.1.1.1, 2.2.2.2,3.3.3.3", v, "every line, joined")
	_, ok = r.Header("x-missing")
	require.False(t, ok)
	_, _, n = r.HeaderLines("x-cond")
	require.Equal(t, 1, n, "lines of another header come from the same map")

	// Without the map, each header is the host's to answer: the removed ones are gone.
	var fresh request
	_, ok = fresh.Header("x-cond")
	require.False(t, ok)
	require.Empty(t, fresh.Method())
	require.False(t, fresh.mapRead, "a header read alone does not read the map")

	// After reset the next request reads the host again.
	r.reset()
	require.Empty(t, r.Method())
}

// With preferMap (a configuration whose rules read the map anyway), the first header read of a
// request reads the whole map, and the key header's lines come from it too.
func TestPreferMapReadsTheMapFirst(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"r","key":[{"source":"header","name":"x-tenant"}],"algorithm":"token_bucket","limit":10,"window":"1s"}]}`)
	id := d.host.InitializeHttpContext()
	d.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {"x-tenant", "acme"}}, true)
	defer d.host.CompleteHttpContext(id)

	r := request{preferMap: true}
	require.Equal(t, "GET", r.Method())
	require.True(t, r.mapRead)
	require.NoError(t, abi.RemoveHttpRequestHeader("x-tenant"))
	first, _, n := r.HeaderLines("x-tenant")
	require.Equal(t, "acme", first, "answered from the map read for :method")
	require.Equal(t, 1, n)
	r.reset()
	require.True(t, r.preferMap, "the plugin's choice outlives the request")
	require.False(t, r.mapRead)
}

// readsHeaderMap is set for rules that read the whole map whenever they apply: a header key
// part, or a client IP from X-Forwarded-For; not for other keys or header conditions.
func TestReadsHeaderMap(t *testing.T) {
	const alg = `"algorithm":"token_bucket","limit":10,"window":"1s"`
	for _, tc := range []struct {
		config string
		want   bool
	}{
		{`{"rules":[{"name":"r",` + alg + `}]}`, false},
		{`{"rules":[{"name":"r","key":[{"source":"client_ip"}],` + alg + `}]}`, false},
		{`{"rules":[{"name":"r","match":{"headers":[{"name":"x-a","exact":"b"}]},"key":[{"source":"path"}],` + alg + `}]}`, false},
		{`{"trusted_hops":1,"rules":[{"name":"r","key":[{"source":"client_ip"}],` + alg + `}]}`, true},
		{`{"rules":[{"name":"a","continue":true,` + alg + `},{"name":"b","key":[{"source":"header","name":"x-k"}],` + alg + `}]}`, true},
	} {
		cfg, err := config.Parse([]byte(tc.config))
		require.NoError(t, err, tc.config)
		require.Equal(t, tc.want, readsHeaderMap(cfg), tc.config)
	}
}

// HeaderLines keeps one answer (the last header asked for); another header's lines are
// scanned again in the map already read, and answer the same. With keepLines (shadow request
// headers, whose removal makes the filter read the map again) each header keeps the answer it
// was first given: a header removed after its lines were read still has them, as it had when
// the rules matched.
func TestHeaderLinesKeepTheirAnswers(t *testing.T) {
	d := newNative(t, `{"rules":[{"name":"r","key":[{"source":"header","name":"x-a"}],"algorithm":"token_bucket","limit":10,"window":"1s"}]}`)
	id := d.host.InitializeHttpContext()
	d.host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {"x-a", "1"}, {"x-b", "b"}, {"x-a", "2"}}, true)
	defer d.host.CompleteHttpContext(id)
	lines := func(r *request, name string) [3]any {
		first, last, n := r.HeaderLines(name)
		return [3]any{first, last, n}
	}

	var r request
	require.Equal(t, [3]any{"1", "2", 2}, lines(&r, "x-a"))
	require.Equal(t, [3]any{"b", "b", 1}, lines(&r, "x-b"))
	require.Equal(t, [3]any{"1", "2", 2}, lines(&r, "x-a"), "scanned again in the same map")
	require.Equal(t, [3]any{"", "", 0}, lines(&r, "x-none"))

	k := request{keepLines: true}
	require.Equal(t, [3]any{"1", "2", 2}, lines(&k, "x-a"))
	require.NoError(t, abi.RemoveHttpRequestHeader("x-a"))
	k.forgetHeaderMap()
	require.Equal(t, [3]any{"b", "b", 1}, lines(&k, "x-b"), "read from the host's map again")
	require.Equal(t, [3]any{"1", "2", 2}, lines(&k, "x-a"), "kept as first answered")
	v, ok := k.Header("x-a")
	require.True(t, ok)
	require.Equal(t, "1", v, "Header answers the first line kept")

	// The map read again lacks those lines (the SDK's emulator removes the first):
	// the answers above came from the kept ones, not from a scan.
	var after request
	require.NotEqual(t, [3]any{"1", "2", 2}, lines(&after, "x-a"))
}

// The header cache compares names by pointer first; a name equal in bytes but held elsewhere
// must still find its entry, and names of one length that differ must not.
func TestSameString(t *testing.T) {
	name := "x-tenant"
	other := string([]byte("x-tenant")) // the same bytes, another array
	require.True(t, sameString(name, name))
	require.True(t, sameString(name, other))
	require.False(t, sameString(name, "x-tenanu"))
	require.False(t, sameString(name, "x-tenan"))
	require.True(t, sameString("", ""))

	var r request
	c := r.cached(name)
	require.Same(t, c, r.cached(other))
	require.NotSame(t, c, r.cached("x-tenanu"))
}
