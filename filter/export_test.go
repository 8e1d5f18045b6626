package filter

import "github.com/ratelimit-wasm/ratelimit/sharedstate"

// WithClock makes the filter read the time (Unix nanoseconds) from now instead of the system
// clock, so tests can step time exactly.
func WithClock(now func() int64) Option { return func(o *options) { o.now = now } }

// WithStore makes the filter keep local state in store instead of the host's shared data, so
// tests can put a real store between the filter and the host (for example one that loses
// compare-and-swap races, sharedstate/storetest.Racing).
func WithStore(store sharedstate.Store) Option { return func(o *options) { o.store = store } }
