package sharedstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// sched runs the store operations of several workers (one Table each, each on a goroutine of
// its own) one at a time, in an order a strategy picks: every operation waits until the
// controller gives its worker the turn, so a schedule is a sequence of worker numbers and is
// replayed exactly from the strategy's seed. The store below decides every outcome.
type sched struct {
	mu    sync.Mutex
	cond  *sync.Cond
	state []int8 // schedRunning, schedWaiting or schedFinished, per worker
	on    bool   // off while the tables are created
	steps int
	log   []string // with schedLog: every operation and its outcome
	// secret is the store's slot-addressing secret, with which the log names the keys.
	secret [SecretSize]byte
}

// schedLog makes runSched log every store operation (for replaying a failing seed).
var schedLog = os.Getenv("SCHED_LOG") != ""

const (
	schedRunning int8 = iota
	schedWaiting
	schedFinished
)

func newSched(workers int) *sched {
	s := &sched{state: make([]int8, workers)}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// step is called by worker w before each store operation: it waits for w's turn.
func (s *sched) step(w int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.on {
		return
	}
	s.state[w] = schedWaiting
	s.cond.Broadcast()
	for s.state[w] != schedRunning {
		s.cond.Wait()
	}
}

func (s *sched) finish(w int) {
	s.mu.Lock()
	s.state[w] = schedFinished
	s.cond.Broadcast()
	s.mu.Unlock()
}

// drive gives the turn, one operation at a time, to the waiting worker pick chooses, until
// every worker has finished. pick gets the waiting workers and the worker that ran last.
func (s *sched) drive(pick func(waiting []int, last int) int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := -1
	var waiting []int
	for {
		for {
			running := false
			for _, st := range s.state {
				running = running || st == schedRunning
			}
			if !running {
				break
			}
			s.cond.Wait()
		}
		waiting = waiting[:0]
		for w, st := range s.state {
			if st == schedWaiting {
				waiting = append(waiting, w)
			}
		}
		if len(waiting) == 0 {
			return
		}
		last = pick(waiting, last)
		s.steps++
		s.state[last] = schedRunning
		s.cond.Broadcast()
	}
}

// schedStore is one worker's view of the shared store under a sched.
type schedStore struct {
	Store
	who int
	s   *sched
}

func (st *schedStore) Get(key string) ([]byte, uint32, error) {
	st.s.step(st.who)
	v, cas, err := st.Store.Get(key)
	if schedLog && st.s.on {
		st.s.log = append(st.s.log, fmt.Sprintf("w%d Get %s -> %s cas %d %v", st.who, key, slotString(st.s.secret, v), cas, err))
	}
	return v, cas, err
}

func (st *schedStore) Set(key string, value []byte, cas uint32) error {
	st.s.step(st.who)
	err := st.Store.Set(key, value, cas)
	if schedLog && st.s.on {
		st.s.log = append(st.s.log, fmt.Sprintf("w%d Set %s = %s cas %d -> %v", st.who, key, slotString(st.s.secret, value), cas, err))
	}
	return err
}

// slotString describes a slot or index value for the log.
func slotString(secret [SecretSize]byte, v []byte) string {
	if len(v) < slotHeader || v[DigestSize] != slotLive {
		return fmt.Sprintf("%x", v)
	}
	who := "client-?"
	for _, k := range []string{schedKey, "client-b", "client-c", "client-d"} {
		if d := digestUnder(secret, k); [DigestSize]byte(v[:DigestSize]) == d {
			who = k
		}
	}
	return fmt.Sprintf("%s live %x", who, v[slotHeader:])
}

// schedWorker is one worker VM of a schedCase: its table's max_keys, its clock, and the keys
// it requests, in order (one request each).
type schedWorker struct {
	maxKeys uint32
	now     int64
	keys    []string
}

// schedCase is a store state and a set of workers that race on it. Every request for
// schedKey is counted; the other keys only disturb (they fill buckets and the count of
// created slots while the key is being created).
type schedCase struct {
	name string
	cfg  algorithms.Config
	// allowance is what schedKey may still admit after setup: the limit, less what setup
	// spent.
	allowance int
	workers   []schedWorker
	// final is the max_keys of the configuration that remains (its tables probe the key
	// afterwards); 0: the last worker's.
	final uint32
	// setup prepares the store before the workers' tables are made (which registers their
	// geometries in worker order).
	setup func(t testing.TB, store Store, secret [SecretSize]byte, lim Limiter)
}

// schedKey is the key whose admissions are counted.
const schedKey = "client-a"

const schedPrefix = "rl|sched|"

// schedResult is what one schedule did.
type schedResult struct {
	admitted  int // requests for schedKey admitted by the workers and the probes after them
	exhausted int // requests (any key) denied as contention, ErrAttemptsExhausted
	steps     int // store operations scheduled
}

// runSched runs c's workers in the schedule pick chooses, on a store whose secret comes from seed, then probes schedKey from fresh
// tables of the final configuration until allowance+1 probes have been made, and returns the
// admissions of schedKey in all. One copy per key means exactly c.allowance.
func runSched(t testing.TB, c schedCase, seed uint64, pick func(waiting []int, last int) int) schedResult {
	mem := NewMemory()
	// The secret (which places the keys) is drawn from the seed too, so that a seed replays
	// its schedule exactly and the seeds cover many layouts.
	if err := mem.Set(SecretKey, binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, seed), ^seed), 0); err != nil {
		t.Fatal(err)
	}
	secret, err := LoadSecret(mem)
	if err != nil {
		t.Fatal(err)
	}
	lim := mustLimiter(t, c.cfg)
	if c.setup != nil {
		c.setup(t, mem, secret, lim)
	}
	s := newSched(len(c.workers))
	s.secret = secret
	tabs := make([]*Table, len(c.workers))
	for w, wk := range c.workers {
		tabs[w], err = NewTable(TableConfig{Store: &schedStore{Store: mem, who: w, s: s}, Prefix: schedPrefix,
			Slots: wk.maxKeys, Attempts: 8, Limiter: lim, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
	}
	s.on = true
	var res schedResult
	var mu sync.Mutex
	var failure error
	var wg sync.WaitGroup
	for w, wk := range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.finish(w)
			var p Pending
			for _, k := range wk.keys {
				err := tabs[w].AllowN([]byte(k), wk.now, 1, &p)
				mu.Lock()
				switch {
				case errors.Is(err, ErrAttemptsExhausted):
					res.exhausted++
				case err != nil:
					failure = fmt.Errorf("worker %d, key %s: %w", w, k, err)
				case p.Decision.Allowed && k == schedKey:
					res.admitted++
				}
				mu.Unlock()
			}
		}()
	}
	s.drive(pick)
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	res.steps = s.steps
	if schedLog {
		for _, l := range s.log {
			t.Log(l)
		}
	}
	final := c.final
	if final == 0 {
		final = c.workers[len(c.workers)-1].maxKeys
	}
	var now int64
	for _, wk := range c.workers {
		now = max(now, wk.now)
	}
	for range c.allowance + 1 {
		probe, err := NewTable(TableConfig{Store: mem, Prefix: schedPrefix, Slots: final, Attempts: 8, Limiter: lim, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		var p Pending
		if err := probe.AllowN([]byte(schedKey), now, 1, &p); err != nil {
			t.Fatalf("probe: %v", err)
		}
		if p.Decision.Allowed {
			res.admitted++
		}
	}
	return res
}

// uniformPick picks a waiting worker uniformly at random at every operation: many context
// switches, anywhere.
func uniformPick(rng *rand.Rand) func([]int, int) int {
	return func(waiting []int, _ int) int { return waiting[rng.IntN(len(waiting))] }
}

// pctPick is probabilistic concurrency testing (Burckhardt et al., "A randomized scheduler
// with probabilistic guarantees of finding bugs", ASPLOS 2010): workers get random distinct
// priorities, the highest-priority waiting worker runs, and at depth-1 random operations the
// worker about to run drops below every other. A worker so dropped is paused until the others
// finish or drop too: exactly the descheduled claimant, at a random point, depth-1 times.
func pctPick(rng *rand.Rand, workers, depth, length int) func([]int, int) int {
	prio := make([]int, workers)
	for i, p := range rng.Perm(workers) {
		prio[i] = depth + p // above every value a drop assigns
	}
	change := map[int]int{}
	for d := 1; d < depth; d++ {
		change[rng.IntN(length)] = depth - d
	}
	step := 0
	return func(waiting []int, _ int) int {
		best := waiting[0]
		for _, w := range waiting[1:] {
			if prio[w] > prio[best] {
				best = w
			}
		}
		if low, ok := change[step]; ok {
			prio[best] = low
			best = waiting[0]
			for _, w := range waiting[1:] {
				if prio[w] > prio[best] {
					best = w
				}
			}
		}
		step++
		return best
	}
}

// spent returns the state of a key that made n requests at clock at.
func spent(lim Limiter, n int, at int64) []byte {
	var state []byte
	for range n {
		_, state = lim.AllowN(state, at, 1)
	}
	return state
}

// registerGeometries records the rule's geometries, oldest first, as tables of each would.
func registerGeometries(t testing.TB, store Store, secret [SecretSize]byte, lim Limiter, maxKeys ...uint32) {
	t.Helper()
	for _, m := range maxKeys {
		if _, err := NewTable(TableConfig{Store: store, Prefix: schedPrefix, Slots: m, Attempts: 8, Limiter: lim, Secret: secret}); err != nil {
			t.Fatal(err)
		}
	}
}

func schedKeys(keys ...string) []string { return keys }

var schedCases = []schedCase{
	{
		name: "max_keys 1, three workers", allowance: 1,
		cfg: algorithms.Config{Algorithm: "fixed_window", Limit: 1, Window: time.Hour},
		workers: []schedWorker{
			{1, 0, schedKeys(schedKey)}, {1, 0, schedKeys(schedKey)}, {1, 0, schedKeys(schedKey)},
		},
	},
	{
		name: "max_keys 1 full of a spent key: every request in overflow", allowance: 2,
		cfg: algorithms.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Hour},
		workers: []schedWorker{
			{1, 0, schedKeys(schedKey, schedKey)}, {1, 0, schedKeys(schedKey)}, {1, 0, schedKeys(schedKey)},
		},
		setup: func(t testing.TB, store Store, secret [SecretSize]byte, lim Limiter) {
			putOther(t, store, secret, schedPrefix, 1, schedKey, "client-b", 0, spent(lim, 2, 0))
		},
	},
	{
		name: "a neighbour goes idle between the workers' reads", allowance: 1,
		cfg: algorithms.Config{Algorithm: "token_bucket", Limit: 1, Window: time.Hour},
		workers: []schedWorker{
			{5, int64(time.Hour), schedKeys(schedKey)}, {5, int64(time.Hour) - 1, schedKeys(schedKey)}, {5, int64(time.Hour) - 1, schedKeys(schedKey)},
		},
		setup: func(t testing.TB, store Store, secret [SecretSize]byte, lim Limiter) {
			// client-b spent its token at 0, in the key's home slot: idle at exactly 1 h.
			putOther(t, store, secret, schedPrefix, 5, schedKey, "client-b", 0, spent(lim, 1, 0))
		},
	},
	{
		name: "two groups, three workers", allowance: 2,
		cfg: algorithms.Config{Algorithm: "gcra", Limit: 2, Window: time.Hour},
		workers: []schedWorker{
			{1000, 0, schedKeys(schedKey, schedKey)}, {1000, 1, schedKeys(schedKey)}, {1000, 2, schedKeys(schedKey)},
		},
	},
	{
		name: "two groups of near load, other keys filling them meanwhile", allowance: 2,
		cfg: algorithms.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Hour},
		workers: []schedWorker{
			{64, 0, schedKeys(schedKey, schedKey)}, {64, 0, schedKeys("client-b", schedKey)}, {64, 0, schedKeys("client-c", "client-d", schedKey)},
		},
		setup: func(t testing.TB, store Store, secret [SecretSize]byte, lim Limiter) {
			// The key's first group has exactly firstGroupFree free slots: one more key there
			// changes the group a new key goes to (see firstGroupFree).
			g, b, home, _ := layoutOf(secret, 64, schedKey)
			if b[0] == b[1] {
				return
			}
			for i := range g.size(b[0]) - firstGroupFree {
				d := digestUnder(secret, fmt.Sprintf("filler-%d", i))
				putEntry(t, store, schedPrefix, g, b[0], (home+1+i)%g.size(b[0]), d, liveValue(d, spent(lim, 1, 0)))
			}
		},
	},
	{
		name: "full table: one idle slot, another new key after it", allowance: 1,
		cfg: algorithms.Config{Algorithm: "token_bucket", Limit: 1, Window: time.Hour},
		workers: []schedWorker{
			{2, int64(time.Hour), schedKeys(schedKey)}, {2, int64(time.Hour) + 1, schedKeys(schedKey)}, {2, int64(time.Hour), schedKeys("client-c", schedKey)},
		},
		setup: func(t testing.TB, store Store, secret [SecretSize]byte, lim Limiter) {
			// Both slots used: client-b's, idle at 1 h by every worker's clock, and
			// client-d's, spent at 1 h.
			putOther(t, store, secret, schedPrefix, 2, schedKey, "client-b", 0, spent(lim, 1, 0))
			putOther(t, store, secret, schedPrefix, 2, schedKey, "client-d", 1, spent(lim, 1, int64(time.Hour)))
		},
	},
	{
		name: "a placer paused after its index entry", allowance: 2,
		cfg: algorithms.Config{Algorithm: "token_bucket", Limit: 2, Window: time.Hour},
		workers: []schedWorker{
			{5, int64(time.Hour), schedKeys(schedKey)}, {5, int64(time.Hour) + sec/2, schedKeys(schedKey, schedKey)}, {5, int64(time.Hour) + 3*sec/2, schedKeys(schedKey)},
		},
		setup: func(t testing.TB, store Store, secret [SecretSize]byte, lim Limiter) {
			// The key's index entry, for its home slot, which still holds client-b's state:
			// a worker that placed the key stopped before writing the slot.
			g, b, home, d := layoutOf(secret, 5, schedKey)
			other := digestUnder(secret, "client-b")
			putEntry(t, store, schedPrefix, g, b[0], home, other, liveValue(other, spent(lim, 2, 0)))
			putEntry(t, store, schedPrefix, g, b[0], home, d, nil)
		},
	},
	{
		name: "a key active under a previous max_keys, old and new VMs", allowance: 2,
		cfg: algorithms.Config{Algorithm: "fixed_window", Limit: 3, Window: time.Hour}, final: 10,
		workers: []schedWorker{
			{5, sec, schedKeys(schedKey)}, {10, sec, schedKeys(schedKey)}, {10, sec, schedKeys(schedKey)},
		},
		setup: func(t testing.TB, store Store, secret [SecretSize]byte, lim Limiter) {
			registerGeometries(t, store, secret, lim, 5)
			g, b, home, d := layoutOf(secret, 5, schedKey)
			putEntry(t, store, schedPrefix, g, b[0], (home+2)%g.size(b[0]), d, liveValue(d, spent(lim, 1, 0)))
		},
	},
	{
		name: "a key active under a previous max_keys, the new table filling up", allowance: 2,
		cfg: algorithms.Config{Algorithm: "fixed_window", Limit: 3, Window: time.Hour}, final: 1,
		workers: []schedWorker{
			{1, sec, schedKeys(schedKey)}, {1, sec, schedKeys(schedKey)}, {1, sec, schedKeys("client-b")}, {5, sec, schedKeys(schedKey)},
		},
		setup: func(t testing.TB, store Store, secret [SecretSize]byte, lim Limiter) {
			registerGeometries(t, store, secret, lim, 5)
			g, b, home, d := layoutOf(secret, 5, schedKey)
			putEntry(t, store, schedPrefix, g, b[0], home, d, liveValue(d, spent(lim, 1, 0)))
		},
	},
}

// schedSeeds is how many schedules of each strategy TestNewKeyRaceRandomSchedules runs per
// case; SCHED_SEEDS overrides it for a longer search.
func schedSeeds() int {
	if v, err := strconv.Atoi(os.Getenv("SCHED_SEEDS")); err == nil && v > 0 {
		return v
	}
	return 300
}

// TestNewKeyRaceRandomSchedules is a randomized model check of create's claims and their
// adoption with three or four workers: for every schedCase (max_keys 1, a neighbour going
// idle, two buckets, fresh and stale claims, clocks further apart than claimTTL, full tables,
// keys moved from or revived from a forward of a previous max_keys, with old and new VMs,
// while another key fills the new table), it runs schedules chosen
// uniformly at random and by probabilistic concurrency testing at depths 1 to 4 (pctPick),
// each from a seed that replays it, and requires that the key admits exactly its allowance
// (never two live copies, no state lost) and that no request is denied as contention.
func TestNewKeyRaceRandomSchedules(t *testing.T) {
	seeds := schedSeeds()
	for _, c := range schedCases {
		t.Run(c.name, func(t *testing.T) {
			solo := runSched(t, c, 0, func(w []int, _ int) int { return w[0] })
			runs, bad, contended := 0, 0, 0
			check := func(strategy string, seed int, r schedResult) {
				runs++
				if r.admitted != c.allowance {
					bad++
					if bad <= 3 {
						t.Errorf("%s seed %d: %d admitted, want %d", strategy, seed, r.admitted, c.allowance)
					}
				}
				if r.exhausted > 0 {
					contended++
					if contended <= 3 {
						t.Errorf("%s seed %d: %d requests denied as contention", strategy, seed, r.exhausted)
					}
				}
			}
			for seed := range seeds {
				rng := rand.New(rand.NewPCG(uint64(seed), 1))
				check("uniform", seed, runSched(t, c, uint64(seed), uniformPick(rng)))
				for depth := 1; depth <= 4; depth++ {
					rng := rand.New(rand.NewPCG(uint64(seed), uint64(depth)+1))
					check(fmt.Sprintf("pct depth %d", depth), seed, runSched(t, c, uint64(seed), pctPick(rng, len(c.workers), depth, solo.steps)))
				}
			}
			if bad > 0 || contended > 0 {
				t.Errorf("%d of %d schedules admitted other than %d; %d denied a request as contention", bad, runs, c.allowance, contended)
			}
			t.Logf("%d schedules (%d operations alone)", runs, solo.steps)
		})
	}
}

// TestSchedReplay replays one schedule of TestNewKeyRaceRandomSchedules, with every store
// operation logged, and checks it the same way. It runs only when asked:
//
//	SCHED_LOG=1 SCHED_CASE='max_keys 1, three workers' SCHED_DEPTH=2 SCHED_SEED=7 \
//	    go test -count=1 -run TestSchedReplay -v ./sharedstate/
//
// (SCHED_DEPTH 0 is the uniform strategy, 1 to 4 probabilistic concurrency testing.)
func TestSchedReplay(t *testing.T) {
	name := os.Getenv("SCHED_CASE")
	if name == "" {
		t.Skip("SCHED_CASE is not set")
	}
	depth, _ := strconv.Atoi(os.Getenv("SCHED_DEPTH"))
	seed, _ := strconv.Atoi(os.Getenv("SCHED_SEED"))
	for _, c := range schedCases {
		if c.name != name {
			continue
		}
		solo := runSched(t, c, 0, func(w []int, _ int) int { return w[0] })
		var r schedResult
		if depth == 0 {
			r = runSched(t, c, uint64(seed), uniformPick(rand.New(rand.NewPCG(uint64(seed), 1))))
		} else {
			r = runSched(t, c, uint64(seed), pctPick(rand.New(rand.NewPCG(uint64(seed), uint64(depth)+1)), len(c.workers), depth, solo.steps))
		}
		if r.admitted != c.allowance || r.exhausted > 0 {
			t.Errorf("%d admitted, want %d; %d denied as contention", r.admitted, c.allowance, r.exhausted)
		}
		return
	}
	t.Fatalf("no case named %q", name)
}

// Workers whose clocks are seconds apart (a worker thread descheduled mid-request resumes with
// its clock of then), taking turns every two store operations, place one new key: one
// placement wins, the others decide on its state: one request admitted, the limit, and no
// contention.
func TestNewKeyAcrossClockSkew(t *testing.T) {
	c := schedCase{name: "clocks 1.5 s apart, taking turns", allowance: 1,
		cfg: algorithms.Config{Algorithm: "fixed_window", Limit: 1, Window: time.Hour}}
	for w := range 3 {
		c.workers = append(c.workers, schedWorker{5, int64(w) * 3 * sec / 2, schedKeys(schedKey)})
	}
	for seed := range 20 {
		step := 0
		r := runSched(t, c, uint64(seed), func(waiting []int, _ int) int {
			step++
			return waiting[(step/2)%len(waiting)]
		})
		if r.admitted != 1 || r.exhausted != 0 {
			t.Fatalf("secret %d: %d admitted, %d denied as contention; want 1 and none", seed, r.admitted, r.exhausted)
		}
	}
}

// boundedPick replays forced choices (operation number -> worker) and otherwise lets the
// worker that ran last continue while it can, then the lowest-numbered waiting worker; it
// records, per operation, the waiting workers and the one chosen, for exploreBounded.
type boundedPick struct {
	forced  map[int]int
	waiting [][]int
	chosen  []int
}

func (b *boundedPick) pick(waiting []int, last int) int {
	step := len(b.chosen)
	b.waiting = append(b.waiting, append([]int(nil), waiting...))
	w, ok := b.forced[step]
	if !ok || !slicesContains(waiting, w) {
		w = waiting[0]
		if slicesContains(waiting, last) {
			w = last
		}
	}
	b.chosen = append(b.chosen, w)
	return w
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// exploreBounded runs every schedule of c with at most bound preemptions (a switch away from
// a worker that could have gone on), by iterative context bounding (Musuvathi and Qadeer,
// "Iterative context bounding for systematic testing of multithreaded programs", PLDI 2007),
// on the store of secret seed, and calls check with each result. It returns the number of
// schedules run.
func exploreBounded(t testing.TB, c schedCase, seed uint64, bound int, check func(forced map[int]int, r schedResult)) int {
	type node struct {
		forced      map[int]int
		from        int // the first operation at which new choices may be made
		preemptions int
	}
	stack := []node{{forced: map[int]int{}}}
	runs := 0
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		b := &boundedPick{forced: n.forced}
		r := runSched(t, c, seed, b.pick)
		runs++
		check(n.forced, r)
		pre := n.preemptions
		for step := n.from; step < len(b.chosen); step++ {
			prev := -1
			if step > 0 {
				prev = b.chosen[step-1]
			}
			for _, w := range b.waiting[step] {
				if w == b.chosen[step] {
					continue
				}
				cost := 0
				if prev >= 0 && w != prev && slicesContains(b.waiting[step], prev) {
					cost = 1
				}
				if pre+cost > bound {
					continue
				}
				forced := make(map[int]int, len(n.forced)+1)
				for k, v := range n.forced {
					forced[k] = v
				}
				for s := n.from; s < step; s++ {
					forced[s] = b.chosen[s]
				}
				forced[step] = w
				stack = append(stack, node{forced: forced, from: step + 1, preemptions: pre + cost})
			}
			if prev >= 0 && b.chosen[step] != prev && slicesContains(b.waiting[step], prev) {
				pre++
			}
		}
	}
	return runs
}

// TestNewKeyRaceBoundedSchedules runs every schedCase in every schedule with at most one
// preemption (SCHED_BOUND raises it; 2 takes minutes), and requires what
// TestNewKeyRaceRandomSchedules does.
func TestNewKeyRaceBoundedSchedules(t *testing.T) {
	bound := 1
	if v, err := strconv.Atoi(os.Getenv("SCHED_BOUND")); err == nil {
		bound = v
	}
	for _, c := range schedCases {
		t.Run(c.name, func(t *testing.T) {
			bad, contended := 0, 0
			runs := exploreBounded(t, c, 1, bound, func(forced map[int]int, r schedResult) {
				if r.admitted != c.allowance {
					bad++
					if bad <= 3 {
						t.Errorf("schedule %v: %d admitted, want %d", forced, r.admitted, c.allowance)
					}
				}
				if r.exhausted > 0 {
					contended++
					if contended <= 3 {
						t.Errorf("schedule %v: %d requests denied as contention", forced, r.exhausted)
					}
				}
			})
			if bad > 0 || contended > 0 {
				t.Errorf("%d of %d schedules admitted other than %d; %d denied a request as contention", bad, runs, c.allowance, contended)
			}
			t.Logf("%d schedules with at most %d preemptions", runs, bound)
		})
	}
}
