package wasmhost

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

var vt0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Timers fire in order of due instant (ties in the order they were set), each with the clock
// reading its own instant; a stopped timer never fires; a timer a callback sets fires within
// the same Advance when it falls due.
func TestVirtualClockOrder(t *testing.T) {
	c := NewVirtualClock(vt0)
	var fired []string
	at := map[string]time.Duration{}
	add := func(name string, d time.Duration) func() bool {
		return c.afterFunc(d, func() { fired = append(fired, name); at[name] = c.Now().Sub(vt0) })
	}
	add("b", 20*time.Millisecond)
	add("a", 10*time.Millisecond)
	add("b2", 20*time.Millisecond)
	stop := add("never", 15*time.Millisecond)
	c.afterFunc(30*time.Millisecond, func() {
		fired = append(fired, "c")
		add("chained", 5*time.Millisecond) // due at 35ms
	})
	require.True(t, stop())
	require.False(t, stop(), "a stopped timer cannot be stopped twice")
	require.Equal(t, 4, c.Pending())
	c.Advance(9 * time.Millisecond)
	require.Empty(t, fired)
	c.Advance(31 * time.Millisecond)
	require.Equal(t, []string{"a", "b", "b2", "c", "chained"}, fired)
	require.Equal(t, 10*time.Millisecond, at["a"])
	require.Equal(t, 20*time.Millisecond, at["b2"])
	require.Equal(t, 35*time.Millisecond, at["chained"])
	require.Equal(t, 40*time.Millisecond, c.Now().Sub(vt0))
	c.AdvanceTo(vt0) // never backwards
	require.Equal(t, 40*time.Millisecond, c.Now().Sub(vt0))
	require.Zero(t, c.Pending())
}

// The worker VMs' proxy_on_tick timers follow the virtual clock: the placeholder asks for a
// tick every 100ms, so after 99ms no VM has ticked, at 100ms each of the three has ticked once,
// and a second later each has ticked exactly 11 times.
func TestVirtualClockTicks(t *testing.T) {
	c := NewVirtualClock(vt0)
	h := newTestHost(t, wasmtest.BuildGuest(t, placeholderModule), Options{
		Workers: 3, VMID: "vclock-ticks", VirtualClock: c,
	})
	require.Equal(t, []int64{0, 0, 0}, h.Stats().Ticks)
	c.Advance(99 * time.Millisecond)
	require.Equal(t, []int64{0, 0, 0}, h.Stats().Ticks)
	c.Advance(time.Millisecond)
	require.Equal(t, []int64{1, 1, 1}, h.Stats().Ticks)
	c.Advance(time.Second)
	require.Equal(t, []int64{11, 11, 11}, h.Stats().Ticks)
	m, _ := h.Metric("placeholder_ticks_total")
	require.EqualValues(t, 33, m)
}

// A callout's timeout follows the virtual clock: against an upstream that accepts and never
// answers, the placeholder's callout (timeout 1000ms) is answered 504 "upstream request
// timeout" exactly when the clock reaches its deadline, however long that takes in real time.
func TestVirtualClockCalloutTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	c := NewVirtualClock(vt0)
	h := newTestHost(t, wasmtest.BuildGuest(t, placeholderModule), Options{
		Workers: 1, VMID: "vclock-callout", VirtualClock: c,
		PluginConfig: []byte(`{"cluster":"silent"}`),
		Clusters:     map[string]string{"silent": "http://" + l.Addr().String()},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan *Result, 1)
	go func() {
		res, err := h.Do(ctx, Request{Worker: 0, Path: "/callout"})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	// The tick and the callout's timeout wait.
	require.True(t, c.WaitPending(ctx, 2))
	due, _ := c.NextDue()
	require.Equal(t, vt0.Add(100*time.Millisecond), due, "the tick comes first")
	c.Advance(999 * time.Millisecond)
	select {
	case res := <-done:
		t.Fatalf("answered before the timeout: %+v", res)
	default:
	}
	c.Advance(time.Millisecond)
	res := <-done
	require.NotNil(t, res)
	require.True(t, res.Continued)
	require.Equal(t, "504", res.RequestHeader("x-callout-status"))
	require.Equal(t, vt0.Add(time.Second), res.ContinuedAt)
}

// UpstreamResponse.Delay holds the response back on the virtual clock: the request continued
// at once (ContinuedAt is the start), and its response arrives only when the clock has moved
// the whole delay.
func TestVirtualClockUpstreamDelay(t *testing.T) {
	c := NewVirtualClock(vt0)
	h := newTestHost(t, wasmtest.BuildGuest(t, placeholderModule), Options{
		Workers: 1, VMID: "vclock-delay", VirtualClock: c,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan *Result, 1)
	go func() {
		res, err := h.Do(ctx, Request{Worker: 0, Path: "/", Upstream: &UpstreamResponse{Status: 201, Delay: 250 * time.Millisecond}})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	require.True(t, c.WaitPending(ctx, 2)) // the tick and the delay
	c.Advance(249 * time.Millisecond)
	select {
	case res := <-done:
		t.Fatalf("answered before the delay: %+v", res)
	default:
	}
	c.Advance(time.Millisecond)
	res := <-done
	require.NotNil(t, res)
	require.Equal(t, 201, res.Status)
	require.Equal(t, vt0, res.ContinuedAt)
}
