package wasmhost

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// abiGuest returns the ABI probe guest of testdata/abiguest.
func abiGuest(t testing.TB) []byte {
	t.Helper()
	return wasmtest.BuildGuest(t, "./wasmhost/testdata/abiguest")
}

// startHost is New with a private shared-data store (unless opts names one), so that tests
// never see each other's keys, bounded by the time a slow machine needs to compile.
func startHost(wasm []byte, opts Options) (*Host, error) {
	if opts.SharedData == nil {
		opts.SharedData = NewSharedData()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return New(ctx, wasm, opts)
}

// newTestHost starts a Host with a private shared-data store and closes it
// when the test ends.
func newTestHost(t testing.TB, wasm []byte, opts Options) *Host {
	t.Helper()
	h, err := startHost(wasm, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, h.Close(ctx))
	})
	return h
}

func do(t testing.TB, h *Host, r Request) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := h.Do(ctx, r)
	require.NoError(t, err)
	return res
}

func logsContaining(h *Host, substr string) []LogEntry {
	var out []LogEntry
	for _, e := range h.Logs() {
		if strings.Contains(e.Message, substr) {
			out = append(out, e)
		}
	}
	return out
}

func TestGuestSmoke(t *testing.T) {
	h := newTestHost(t, abiGuest(t), Options{Workers: 2, LogLevel: LogDebug})
	res := do(t, h, Request{Worker: -1, Path: "/hello"})
	require.True(t, res.Continued)
	require.Equal(t, "ok", res.RequestHeader("x-guest"))
	require.Equal(t, "1", res.RequestHeader("x-guest-eos"))
	require.Equal(t, 200, res.Status)
	require.Equal(t, "ok", res.Header("x-guest-resp"))
	t.Log(h.Logs())
}
