package redis_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
)

// changeConfigs are the configurations of the differential configuration-change test: every
// algorithm with a global mode, two or more configurations each, so that the pairs change
// limit, window and burst up and down, the sliding window's variant, and the algorithm.
var changeConfigs = []algorithms.Config{
	{Algorithm: "token_bucket", Limit: 10, Window: time.Second},
	{Algorithm: "token_bucket", Limit: 10, Window: time.Second, Burst: 20},
	{Algorithm: "token_bucket", Limit: 5, Window: time.Second, Burst: 3},
	{Algorithm: "token_bucket", Limit: 10, Window: 2 * time.Second},
	{Algorithm: "leaky_bucket", Limit: 10, Window: time.Second},
	{Algorithm: "leaky_bucket", Limit: 7, Window: 1300 * time.Millisecond, Burst: 3},
	{Algorithm: "gcra", Limit: 10, Window: time.Second},
	{Algorithm: "gcra", Limit: 10, Window: time.Second, Burst: 3},
	{Algorithm: "gcra", Limit: 5, Window: 2 * time.Second, Burst: 20},
	{Algorithm: "fixed_window", Limit: 10, Window: time.Second},
	{Algorithm: "fixed_window", Limit: 3, Window: 1300 * time.Millisecond},
	{Algorithm: "fixed_window", Limit: 20, Window: 500 * time.Millisecond},
	{Algorithm: "sliding_window", Limit: 10, Window: time.Second},
	{Algorithm: "sliding_window", Limit: 20, Window: 500 * time.Millisecond},
	{Algorithm: "sliding_window", Variant: "log", Limit: 10, Window: time.Second},
	{Algorithm: "sliding_window", Variant: "log", Limit: 5, Window: 1300 * time.Millisecond},
}

// The instants at which a configuration change is first seen, relative to the last request
// under the old configuration.
const (
	changeSame    = iota // at the same instant
	changeNext           // a step of the ordinary random walk (nextNow)
	changeBack           // earlier: a proxy whose clock is behind
	changeIdle           // hours to weeks later: the old configuration finds the key idle
	changeAtReset        // exactly when the old configuration is back to full allowance, or 1ns before
	changeModes
)

// TestDifferentialConfigChange runs Go and the script on the same random histories under one
// configuration that then continue under another (every configuration of changeConfigs to
// every other), and back, and demands at every step identical decisions, at every change the
// same R (the Remaining of a zero-cost request under the new configuration) on both sides and
// equal to what the Go semantics prescribe (min(R_old, capacity_new), or capacity_new when
// the old configuration finds the key idle), and after every admission identical stored
// states (the same recorded parameters and the same fields).
func TestDifferentialConfigChange(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	loadScripts(t, srv)
	limiters := make([]algorithms.Limiter, len(changeConfigs))
	for i, cfg := range changeConfigs {
		lim, err := algorithms.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		limiters[i] = lim
	}
	// The pairs run in parallel, each on keys of its own; the counts are checked once all of
	// them have finished.
	var conversions, idleConversions, staleConversions, admitted atomic.Int64
	t.Cleanup(func() {
		t.Logf("%d conversions (%d of idle keys, %d at tc > now), %d admissions with their states compared",
			conversions.Load(), idleConversions.Load(), staleConversions.Load(), admitted.Load())
		if conversions.Load() == 0 || idleConversions.Load() == 0 || staleConversions.Load() == 0 {
			t.Errorf("weak test: %d conversions, %d idle, %d stale", conversions.Load(), idleConversions.Load(), staleConversions.Load())
		}
	})
	for i, a := range changeConfigs {
		for j, b := range changeConfigs {
			if i == j {
				continue
			}
			t.Run(cfgName(a)+"->"+cfgName(b), func(t *testing.T) {
				t.Parallel()
				c := newClient(t, srv.WebdisURL())
				for s := range 3 {
					mode := (i + j + s) % changeModes
					r := rand.New(rand.NewPCG(uint64(i*100+j), uint64(s)))
					key := fmt.Sprintf("chg:{t}:%d:%d:%d", i, j, s)
					d := newDiffer(t, c, a, key)
					// recorded is the index of the configuration the stored state was written
					// under (-1: nothing stored yet).
					recorded := -1
					// Each pair runs from 2025, from a few seconds after the epoch (timestamps of
					// fewer than 10 digits) and from 2 hours before MaxTime (the clamp).
					now := []int64{1_764_480_000_123_456_789, 1_500_000_000, algorithms.MaxTime - int64(2*time.Hour)}[s] +
						r.Int64N(int64(time.Second))
					var last algorithms.Decision
					run := func(ci, steps int) {
						for range steps {
							now = nextNow(r, now, changeConfigs[ci], last)
							last = d.do(now, nextN(r, changeConfigs[ci]))
							if last.Allowed {
								recorded = ci
								admitted.Add(1)
								compareStates(t, srv, key, d.state)
							}
						}
					}
					change := func(from, to int, mode int) {
						switch mode {
						case changeNext:
							now = nextNow(r, now, changeConfigs[from], last)
						case changeBack:
							now -= 1 + r.Int64N(int64(changeConfigs[from].Window))
						case changeIdle:
							now += int64(time.Hour) + r.Int64N(int64(40*24*time.Hour))
						case changeAtReset:
							if recorded >= 0 {
								reset := peek(limiters[recorded], d.state, now).ResetAfter
								now += int64(reset) - r.Int64N(2)
							}
						}
						now = min(max(now, 0), algorithms.MaxTime) // the instant both sides decide at
						d.lim, d.rule = limiters[to], mustRule(t, changeConfigs[to])
						want := capacity(changeConfigs[to])
						if recorded >= 0 && recorded != to {
							old := limiters[recorded]
							conversions.Add(1)
							rOld := peek(old, d.state, now).Remaining
							switch {
							case old.Idle(d.state, now):
								idleConversions.Add(1)
							default:
								want = min(rOld, want)
							}
							tc := conversionInstant(d.state, now)
							if tc > now {
								staleConversions.Add(1)
							}
							if cfg := changeConfigs[to]; cfg.Algorithm == "gcra" {
								// GCRA compares its schedule TAT = tc + C*T with now itself, so
								// with tc > now a request at now sees less than R.
								T := int64(cfg.Window) / cfg.Limit
								tat := tc + (capacity(cfg)-want)*T
								want = max(0, now+T*capacity(cfg)-max(tat, now)) / T
							}
						} else if recorded == to {
							want = peek(d.lim, d.state, now).Remaining
						}
						// The zero-cost request reports R on both sides; do compares them.
						if got := d.do(now, 0).Remaining; got != want {
							t.Fatalf("change %s -> %s at %d (mode %d): R = %d, the Go semantics give %d",
								cfgName(changeConfigs[from]), cfgName(changeConfigs[to]), now, mode, got, want)
						}
					}
					run(i, r.IntN(30))
					change(i, j, mode)
					run(j, 10+r.IntN(25))
					change(j, i, (mode+1+r.IntN(changeModes-1))%changeModes)
					run(i, 10)
				}
			})
		}
	}
}

// conversionInstant is tc = max(now, the instant the configuration recorded in st evaluates
// it at), as package algorithms specifies it: max(now, last) for the buckets, now for GCRA,
// max(now, ws) for the windows (a stored window newer than now's is the one counted; the
// sliding counter's estimate is then taken at its start), max(now, newest) for a log that
// holds a timestamp.
func conversionInstant(st []byte, now int64) int64 {
	le := binary.LittleEndian
	const h = 25
	switch st[0] {
	case 0x13, 0x23:
		return max(now, int64(le.Uint64(st[h+8:])))
	case 0x53, 0x33:
		return max(now, int64(le.Uint64(st[h:])))
	case 0x43, 0x44:
		if st[h] != 0 || st[h+1] != 0 {
			return max(now, int64(le.Uint64(st[h+10:])))
		}
	}
	return now
}

// peek is the decision of lim for a zero-cost request on state at now, which changes nothing.
func peek(lim algorithms.Limiter, state []byte, now int64) algorithms.Decision {
	d, _ := lim.AllowN(slices.Clone(state), now, 0)
	return d
}

// compareStates fails unless the state the script stored at key and the Go state are the
// same: the same recorded parameters and the same fields, in the script's units.
func compareStates(t *testing.T, srv *redistest.Server, key string, goState []byte) {
	t.Helper()
	want, err := goStateString(goState)
	if err != nil {
		t.Fatalf("Go state %x: %v", goState, err)
	}
	// A sliding-window log is stored as a list, every other state as a hash.
	if got := luaStateString(t, srv, key, goState[0] == 0x43 || goState[0] == 0x44); got != want {
		t.Fatalf("stored states differ:\n  go  %s\n  lua %s", want, got)
	}
}

// goStateString renders a Go state (see the layouts in package algorithms) in the form
// luaStateString renders a stored key.
func goStateString(st []byte) (string, error) {
	cfg, ok := algorithms.RecordedConfig(st)
	if !ok {
		return "", fmt.Errorf("no recorded configuration")
	}
	le := binary.LittleEndian
	i64 := func(off int) int64 { return int64(le.Uint64(st[off:])) }
	i32 := func(off int) int64 { return int64(le.Uint32(st[off:])) }
	const h = 25 // the version byte and the parameter block
	var fields string
	switch st[0] {
	case 0x13:
		fields = fmt.Sprintf("t=%d l=%d", i64(h), i64(h+8))
	case 0x23:
		fields = fmt.Sprintf("lv=%d l=%d", i64(h), i64(h+8))
	case 0x63:
		fields = fmt.Sprintf("tat=%d", i64(h))
	case 0x53:
		fields = fmt.Sprintf("ws=%d c=%d", i64(h), i32(h+8))
	case 0x33:
		fields = fmt.Sprintf("ws=%d p=%d c=%d", i64(h), i32(h+8), i32(h+12))
	case 0x43, 0x44:
		width := 4
		if st[0] == 0x44 {
			width = 8
		}
		count := int(st[h]) | int(st[h+1])<<8
		ts := make([]string, 0, count)
		t := i64(h + 2)
		for k := range count {
			if k > 0 {
				off := h + 18 + (k-1)*width
				if width == 4 {
					t += i32(off)
				} else {
					t += i64(off)
				}
			}
			ts = append(ts, strconv.FormatInt(t, 10))
		}
		if count > 0 && t != i64(h+10) {
			return "", fmt.Errorf("the deltas do not lead to newest")
		}
		fields = "ts=" + strings.Join(ts, ",")
	default:
		return "", fmt.Errorf("version %#x", st[0])
	}
	return cfgString(cfg) + " " + fields, nil
}

// luaStateString reads the state the script stored at key: a hash, or when list is set a
// sliding-window log's list (the header "p<parameters>" and the timestamps). A key of the other
// type is rendered as Redis' error, which matches no state.
func luaStateString(t *testing.T, srv *redistest.Server, key string, list bool) string {
	t.Helper()
	if !list {
		v, err := srv.Do("HGETALL", key)
		if err != nil {
			return err.Error()
		}
		arr, _ := v.([]any)
		f := map[string]string{}
		for k := 0; k+1 < len(arr); k += 2 {
			f[fmt.Sprint(arr[k])] = fmt.Sprint(arr[k+1])
		}
		var fields string
		switch f["v"] {
		case "18":
			fields = "t=" + f["t"] + " l=" + f["l"]
		case "34":
			fields = "lv=" + f["lv"] + " l=" + f["l"]
		case "98":
			fields = "tat=" + f["tat"]
		case "82":
			fields = "ws=" + f["ws"] + " c=" + f["c"]
		case "50":
			fields = "ws=" + f["ws"] + " p=" + f["p"] + " c=" + f["c"]
		default:
			return fmt.Sprintf("hash %v", f)
		}
		return f["cfg"] + " " + fields
	}
	v, err := srv.Do("LRANGE", key, "0", "-1")
	if err != nil {
		return err.Error()
	}
	arr, _ := v.([]any)
	if len(arr) == 0 {
		return "empty list"
	}
	ts := make([]string, 0, len(arr)-1)
	for _, v := range arr[1:] {
		ts = append(ts, fmt.Sprint(v))
	}
	return strings.TrimPrefix(fmt.Sprint(arr[0]), "p") + " ts=" + strings.Join(ts, ",")
}

// TestDifferentialV1Window reads window keys in the v1 encoding (no cfg field, read under the
// rule's current parameters) after the rule's window changed:
// a stored window start that is not a multiple of the new window does not decode, in Go and in
// the script alike (a fresh key), and one that is keeps its count. Go and the script must then
// agree on every decision that follows.
func TestDifferentialV1Window(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.WebdisURL())
	loadScripts(t, srv)
	win := int64(1_764_478_800_000_000_000) // a whole hour, not a multiple of 11 minutes
	if win%int64(11*time.Minute) == 0 {
		t.Fatal("the stored start must not be aligned to the 11-minute window")
	}
	for _, cfg := range []algorithms.Config{
		{Algorithm: "fixed_window", Limit: 3, Window: 11 * time.Minute},
		{Algorithm: "fixed_window", Limit: 3, Window: 30 * time.Minute},
		{Algorithm: "sliding_window", Limit: 3, Window: 11 * time.Minute},
		{Algorithm: "sliding_window", Limit: 3, Window: 30 * time.Minute},
	} {
		t.Run(cfgName(cfg), func(t *testing.T) {
			key := "v1:{t}:" + cfgName(cfg)
			le := binary.LittleEndian
			var state []byte
			if cfg.Algorithm == "fixed_window" {
				state = le.AppendUint32(le.AppendUint64([]byte{0x51}, uint64(win)), 3)
				srv.MustDo("HSET", key, "v", "81", "ws", strconv.FormatInt(win, 10), "c", "3")
			} else {
				state = le.AppendUint32(le.AppendUint32(le.AppendUint64([]byte{0x31}, uint64(win)), 0), 3)
				srv.MustDo("HSET", key, "v", "49", "ws", strconv.FormatInt(win, 10), "p", "0", "c", "3")
			}
			d := newDiffer(t, c, cfg, key)
			d.state = state
			// One second after the stored start: the new window that holds it starts earlier
			// when the window does not divide the hour.
			first := d.do(win+int64(time.Second), 1)
			if aligned := win%int64(cfg.Window) == 0; first.Allowed == aligned {
				t.Fatalf("aligned %v: first decision %+v", aligned, first)
			}
			r := rand.New(rand.NewPCG(uint64(cfg.Window), 1))
			now, last := win+int64(time.Second), first
			for range 40 {
				now = nextNow(r, now, cfg, last)
				last = d.do(now, nextN(r, cfg))
			}
		})
	}
}
