package filtertest

import "time"

// OverflowCacheRules is a leased global rule (so with the over-limit cache) with room for one
// key in Redis, keyed on x-k: while client a's key lives, a new client b is decided on the
// rule's overflow key. A denial there is not b's own and must not be cached: once a's key has
// expired, b gets a key of its own and the exact decision admits it.
const OverflowCacheRules = `[{"name":"hot","scope":"global","max_keys":1,"lease":{"batch":2},
	"key":[{"source":"header","name":"x-k"}],"algorithm":"gcra","limit":2,"window":"12s"}]`

// The instants of the sequence, from a's first request: a sends ARequests requests at once,
// spending both of its units (a lease take reserves at most 1/8 of what remains, so each is
// decided on its own), so that its key lives until OverflowAt and past it; b asks at
// OverflowAt until the overflow key denies it (its wait is then 6 s or more); a's key lives at
// most its reset (12 s) and a second of Redis margin, so at FreedAt the key table has room
// again.
const (
	ARequests  = 2
	OverflowAt = 9 * time.Second
	FreedAt    = 14 * time.Second
)
