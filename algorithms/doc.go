// Package algorithms holds the seven rate limiters of the filter as exact, allocation-free,
// pure state machines:
//
//	token_bucket                 TokenBucket
//	leaky_bucket                 LeakyBucket (admission meter, or a shaper when MaxDelay > 0)
//	sliding_window (counter)     SlidingWindowCounter
//	sliding_window (log)         SlidingWindowLog
//	fixed_window                 FixedWindow
//	gcra                         GCRA
//	adaptive                     Adaptive (a controller plus a sliding-window-counter admission)
//
// Each is the algorithm of the same standard name: the token bucket in the terminology of
// RFC 2697/2698 (a bucket of Burst tokens refilled at Limit/Window); the leaky bucket as a
// meter in Turner's sense (an occupancy that drains at a constant rate, the dual of the token
// bucket) or as a queue in Tanenbaum's (the shaper, releasing requests at the leak rate); the
// sliding window counter as popularised by Cloudflare (the current window's count plus the
// previous window's, weighted by the overlap); the sliding window log (one timestamp per
// admitted event); the fixed window counter; the Generic Cell Rate Algorithm of ITU-T I.371;
// and an adaptive limit tuned by AIMD (additive increase, multiplicative decrease), as in
// TCP congestion control. Each type's documentation gives its exact integer formulas.
//
// The package never reads a clock and never calls the host: time is an int64 of Unix
// nanoseconds passed in, and a key's state is a byte string the caller loads and stores
// (Envoy shared data with CAS, or Redis), so the limiters are deterministic, testable over
// fixed instants, and portable to the Redis Lua scripts.
//
// # Decisions
//
// Limiter.AllowN(state, now, n) decides whether n events may pass at now and returns a
// Decision and the state to store. AllowN is all-or-nothing: it never admits part of n.
//
//   - A denied decision never changes the state semantically: the returned state may be a
//     normalised re-encoding of the input, and the caller may skip storing it.
//   - A request that can never pass (n <= 0, or n greater than the capacity: Burst for the
//     buckets and GCRA, Limit for the windows, the current limit for adaptive) is denied with
//     RetryAfter == 0 (Decision.Unsatisfiable) and the input state unchanged. Every other
//     denial has RetryAfter >= 1ns.
//   - RetryAfter is exact: calling again at now+RetryAfter with the same n is allowed if
//     nothing else arrived in between, and calling at now+RetryAfter-1ns is not. The one
//     exception is a denial on a state recorded under other parameters (see "Configuration
//     changes"): RetryAfter is then the new configuration's on the converted state, but a
//     denial stores nothing, so the retry converts the old state again.
//
// # State buffers and aliasing
//
// AllowN writes the new state into state[:0] when cap(state) is at least Limiter.StateSize,
// and otherwise allocates StateSize bytes, so the result usually aliases the input: callers
// must not use the input as "the old state" after the call, nor share one buffer between
// goroutines; one that preallocates StateSize bytes allocates nothing per call.
//
// Every encoding starts with a version byte that is distinct per algorithm and layout, so a
// state written by one algorithm is never misread by another; a 24-byte parameter block
// recording the configuration the state was written under follows (see RecordedConfig), then
// the algorithm's fixed-width little-endian fields. A nil, short, over-long or
// unknown-version state, one whose recorded configuration is invalid, or one whose
// timestamps fall outside [0, MaxTime+2^53] (or, for the clock-aligned windows, are not
// aligned), is a fresh key (full allowance); it never causes a panic. Limiter.Idle tells
// whether a state is equivalent to a fresh key at a given instant, so the shared-data layer
// can reclaim it.
//
// # Configuration changes
//
// A configuration change never grants allowance: a key keeps what it consumed, across a change
// of limit, window, burst, variant, max_delay, shaping or algorithm. A state whose recorded
// parameters equal the limiter's (three 64-bit comparisons) takes the hot path, with the
// decisions of a limiter that never changed. A state recorded under any other parameters, or
// by another algorithm, is first converted, at the decision instant now:
//
//  1. R_old is the Remaining that the old configuration's limiter, rebuilt from the recorded
//     block, reports for the state at now (the whole events it would still admit, a floor;
//     what RateLimit-Remaining showed), and tc is the instant it evaluated the state at: now,
//     or, when now is stale (time went backwards), the later instant the old state last saw
//     (max(now, last) for the buckets, max(now, newest) for the log, the newer of now and the
//     stored window for the windows; GCRA and the shaper compare with now itself, so tc = now).
//  2. R = min(R_old, Capacity), Capacity being the new Burst (Limit when 0) for the buckets
//     and GCRA, the new Limit for the windows, and the limit in force for adaptive.
//  3. The state becomes the new algorithm's state of a key that has exactly R left and whose
//     consumption C = Capacity - R happened at tc; each type's documentation gives it.
//  4. The request is decided on that state as usual. When it is admitted, the converted state
//     with the request applied, recording the new parameters, is returned; when it is denied
//     (or unsatisfiable) the input is returned unchanged, so nothing is written and the next
//     request converts again from the old parameters.
//
// So right after a change a key is admitted at most R_old events, and exactly min(R_old,
// Capacity) in whole requests (except by a shaper whose MaxDelay is shorter than its queue,
// which admits fewer). A key at full allowance under a smaller old capacity keeps that smaller
// allowance until its first admitted request under the new configuration, from which on the
// new configuration refills it. The adaptive admission state compares only its window: the
// limit in force belongs to the controller, and counts carry over when it changes.
//
// Limiter.Idle on such a state reports idle when R_old >= Capacity or the old configuration
// finds it idle, evaluated no later than now (see idleConverted). Idle allocates nothing (the
// old limiter is rebuilt by value); AllowN's conversion one buffer.
//
// States in the first encodings, which recorded no parameters (v1: version bytes 0x11, 0x21,
// 0x22, 0x31, 0x41, 0x42, 0x51, 0x61, 0x71), are read by the limiter of the same layout with
// its current parameters (counts above a lowered limit clamped), as a fresh key by any other,
// and rewritten in the current encoding by an admitted request.
//
// # Time
//
// now is clamped to [0, MaxTime] (2^62 ns, about the year 2116), which makes every sum of a
// timestamp and a duration overflow free. Time may go backwards when workers or proxies with
// slightly different clocks share one state. Every limiter that keeps a "last seen" instant
// evaluates a stale call as if it arrived at that instant (the running maximum), so the stored
// timeline stays monotone, the algorithm's promise holds over it, and a stale call never gets
// more allowance than a call at the latest seen instant; RetryAfter and ResetAfter are still
// relative to the caller's now, so they include the skew. GCRA and the leaky-bucket shaper
// compare a future schedule with now directly, so an earlier now is simply stricter.
//
// # Exact integer arithmetic and the Lua port
//
// All arithmetic is on int64 integers; there is no floating point. Each type's doc comment is
// the specification that the Redis Lua scripts follow step by step. Lua 5.1 numbers are IEEE
// doubles, exact for integers up to 2^53, so New rejects every configuration for which a
// quantity other than an absolute Unix timestamp could exceed 2^53 (MaxExact). Every
// division is a floor division a/b of a non-negative a by a positive b with a+b <= 2^53,
// which Lua computes exactly as math.floor(a/b): the true quotient is at least 1/b below the
// next integer, and with b*(q+1) <= a+b <= 2^53 that gap is larger than half an ulp. ceil(a/b)
// is written floor((a+b-1)/b). Absolute timestamps (about 1.8e18 ns) do not fit a double
// exactly; the Lua port carries them as (seconds, nanoseconds) pairs and only ever adds a
// bounded duration to them, subtracts two of them, or compares them. Differences of two
// absolute timestamps that might exceed 2^53 are only ever compared with a bound below 2^53,
// which stays correct when the difference is rounded. Window alignment (now mod Window) is
// exact in Lua because Window is a whole number of milliseconds: with now = s*1e9 + ns,
// nowMs = s*1000 + floor(ns/1e6) is below 2^53, and
// now mod Window = (nowMs mod WindowMs)*1e6 + (ns mod 1e6).
//
// # Errors
//
// New returns a *ConfigError naming the offending field as the JSON config spells it
// ("limit: must be > 0, got -3"), so the config parser can prefix a JSON path.
package algorithms
