package wasmhost

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// VirtualClock is a clock that only a test moves. Given in Options.VirtualClock, it is the
// host's time everywhere the filter can observe time: proxy_get_current_time_nanoseconds and
// WASI realtime (as Options.Clock), the proxy_on_tick timers of every worker VM, the timeouts
// of proxy_http_call callouts, and UpstreamResponse.Delay. A test then states its timing
// exactly ("released at 100 ms", "decided when the 300 ms callout timeout expires") instead of
// measuring real timers with slack, and no timer can be starved by a loaded machine.
//
// The WASI monotonic clock stays real, as the Go runtime inside the VM needs it for its own
// timers; the filter does not read it for decisions. Real network I/O (a callout that webdis
// answers) still takes real time: only its timeout is virtual.
//
// All methods are safe for concurrent use.
type VirtualClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  timerHeap
	seq     uint64
	changed chan struct{} // closed and replaced whenever a timer is added or removed
}

// NewVirtualClock returns a clock that reads start until it is advanced.
func NewVirtualClock(start time.Time) *VirtualClock {
	return &VirtualClock{now: start, changed: make(chan struct{})}
}

// Now returns the clock's current instant.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (a negative d is treated as 0), firing every timer
// that falls due on the way, in order of due time (ties in the order they were set), each
// with the clock reading its own due instant. A fired timer's callback runs before Advance
// returns: a tick has run on its VM, a timed-out callout has been answered to its VM, an
// upstream delay has ended. Timers that callbacks set and that fall due within the same
// Advance fire too.
func (c *VirtualClock) Advance(d time.Duration) {
	c.AdvanceTo(c.Now().Add(max(d, 0)))
}

// AdvanceTo moves the clock forward to t, as Advance; an instant in the past leaves the clock
// where it is (time never goes back) but still fires the timers already due.
func (c *VirtualClock) AdvanceTo(t time.Time) {
	for {
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].at.After(t) {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return
		}
		tm := heap.Pop(&c.timers).(*vtimer)
		tm.index = -1
		if tm.at.After(c.now) {
			c.now = tm.at
		}
		c.notifyLocked()
		c.mu.Unlock()
		tm.f()
	}
}

// Pending returns the number of timers waiting to fire.
func (c *VirtualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NextDue returns the due instant of the earliest waiting timer, and false when none waits.
func (c *VirtualClock) NextDue() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].at, true
}

// WaitPending blocks until at least n timers wait (for example: a callout has been sent and
// its timeout is armed, or a request waits out its upstream delay), or ctx ends; it reports
// whether the count was reached. Tests use it to know that the host has reached the point at
// which advancing the clock means something.
func (c *VirtualClock) WaitPending(ctx context.Context, n int) bool {
	for {
		c.mu.Lock()
		if len(c.timers) >= n {
			c.mu.Unlock()
			return true
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// afterFunc arranges for f to run (on the goroutine that advances the clock) once the clock
// has moved d past now; the returned function cancels it and reports whether it did.
func (c *VirtualClock) afterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	tm := &vtimer{at: c.now.Add(max(d, 0)), seq: c.seq, f: f}
	heap.Push(&c.timers, tm)
	c.notifyLocked()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if tm.index < 0 {
			return false
		}
		heap.Remove(&c.timers, tm.index)
		tm.index = -1
		c.notifyLocked()
		return true
	}
}

func (c *VirtualClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// vtimer is one waiting timer; index is its place in the heap, -1 once fired or stopped.
type vtimer struct {
	at    time.Time
	seq   uint64
	f     func()
	index int
}

// timerHeap orders timers by due instant, then by the order they were set.
type timerHeap []*vtimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	tm := x.(*vtimer)
	tm.index = len(*h)
	*h = append(*h, tm)
}
func (h *timerHeap) Pop() any {
	old := *h
	tm := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return tm
}

// afterFunc runs f after d of the host's time: on the virtual clock when there is one
// (synchronously, inside VirtualClock.Advance), otherwise on a real timer's goroutine.
func (h *Host) afterFunc(d time.Duration, f func()) (stop func() bool) {
	if h.vclock != nil {
		return h.vclock.afterFunc(d, f)
	}
	return time.AfterFunc(d, f).Stop
}

// sleep waits d of the host's time; it returns ctx's error if ctx ends first, or ErrClosed if
// the host closes first.
func (h *Host) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	done := make(chan struct{})
	stop := h.afterFunc(d, func() { close(done) })
	defer stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-h.closed:
		return ErrClosed
	}
}
