package sharedstate

import (
	"encoding/binary"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// stepStore runs the store operations of several Tables (one per worker) in an order the test
// chooses: each operation waits until the schedule gives its worker the turn. The store below
// decides every outcome; only the order of the operations is chosen.
type stepStore struct {
	Store
	who   int
	sched *schedule
}

func (s *stepStore) Get(key string) ([]byte, uint32, error) {
	s.sched.wait(s.who)
	defer s.sched.done(s.who)
	return s.Store.Get(key)
}

func (s *stepStore) Set(key string, value []byte, cas uint32) error {
	s.sched.wait(s.who)
	defer s.sched.done(s.who)
	return s.Store.Set(key, value, cas)
}

// schedule interleaves two workers with two context switches: worker 1 runs its first i
// operations, worker 0 its first j, then worker 1 runs to the end, then worker 0. Sweeping i and
// j covers every point at which one worker's request can start inside the other's and every
// point at which it can be suspended.
type schedule struct {
	mu       sync.Mutex
	cond     *sync.Cond
	i, j     int
	ops      [2]int
	finished [2]bool
	on       bool // off while the tables are created
}

func newSchedule(i, j int) *schedule {
	s := &schedule{i: i, j: j}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// turn returns the worker whose operation goes next. Called with mu held.
func (s *schedule) turn() int {
	switch {
	case s.ops[1] < s.i && !s.finished[1]:
		return 1
	case s.ops[0] < s.j && !s.finished[0]:
		return 0
	case !s.finished[1]:
		return 1
	}
	return 0
}

func (s *schedule) wait(who int) {
	s.mu.Lock()
	for s.on && s.turn() != who {
		s.cond.Wait()
	}
	s.mu.Unlock()
}

func (s *schedule) done(who int) {
	s.mu.Lock()
	s.ops[who]++
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *schedule) finish(who int) {
	s.mu.Lock()
	s.finished[who] = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

// raceCase is a table state in which two workers decide the same new key at once.
type raceCase struct {
	name    string
	maxKeys uint32
	cfg     algorithms.Config
	now     [2]int64 // each worker's clock
	// setup prepares the store (with the tables' secret) before the race.
	setup func(t *testing.T, store Store, secret [SecretSize]byte, lim Limiter)
}

// raceKey is the key both workers decide.
var raceKey = []byte("client-a")

var raceCases = []raceCase{
	{
		// A key-less rule has max_keys 1. One worker reads the key's slots (none written),
		// the other creates the key and counts the created slot, the first then reads the
		// counter (full) and must not count the key in an overflow slot: two copies.
		name: "max_keys 1, empty table", maxKeys: 1,
		cfg: algorithms.Config{Algorithm: "fixed_window", Limit: 1, Window: time.Minute},
	},
	{
		// Two workers whose clocks are a nanosecond apart see the key's first slot held by
		// another key that goes idle in between: the earlier worker places the new key in
		// the next slot, the later one in the first slot, and both writes succeed.
		name: "a neighbour goes idle between the workers' reads", maxKeys: 5,
		cfg: algorithms.Config{Algorithm: "token_bucket", Limit: 1, Window: time.Hour},
		now: [2]int64{int64(time.Hour), int64(time.Hour) - 1},
		setup: func(t *testing.T, store Store, secret [SecretSize]byte, lim Limiter) {
			g := newGeometry(5)
			k0, k1 := binary.LittleEndian.Uint64(secret[:8]), binary.LittleEndian.Uint64(secret[8:])
			d := Digest(raceKey)
			b, start := g.choices(sipHash24(k0, k1, d[:]))
			other := Digest([]byte("client-b"))
			_, state := lim.AllowN(nil, 0, 1) // spent at 0: idle again at exactly one hour
			v := append(append(other[:], slotLive), state...)
			if err := store.Set(string(appendName(nil, "rl|race|", 5, b[0]*BucketSlots+start[0])), v, 0); err != nil {
				t.Fatal(err)
			}
		},
	},
	{
		name: "two buckets, empty table", maxKeys: 1000,
		cfg: algorithms.Config{Algorithm: "gcra", Limit: 1, Window: time.Hour},
	},
}

// runRace decides raceKey on two Tables (two workers) of one store in schedule (i, j) and
// returns how many of the two requests (and a third one after them) were admitted, how many of
// the two spent all their attempts (contention), and how many operations each worker made.
func runRace(t *testing.T, c raceCase, i, j int) (admitted, exhausted int, ops [2]int) {
	mem := NewMemory()
	secret, err := LoadSecret(mem)
	if err != nil {
		t.Fatal(err)
	}
	lim := mustLimiter(t, c.cfg)
	if c.setup != nil {
		c.setup(t, mem, secret, lim)
	}
	sched := newSchedule(i, j)
	var tabs [2]*Table
	for w := range tabs {
		tabs[w], err = NewTable(TableConfig{Store: &stepStore{Store: mem, who: w, sched: sched}, Prefix: "rl|race|",
			Slots: c.maxKeys, Attempts: 8, Limiter: lim, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Creating the tables made operations of their own: schedule and count from here.
	sched.ops, sched.on = [2]int{}, true
	var wg sync.WaitGroup
	var allowed [2]bool
	var errs [2]error
	for w := range tabs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sched.finish(w)
			var p Pending
			errs[w] = tabs[w].AllowN(raceKey, c.now[w], 1, &p)
			allowed[w] = errs[w] == nil && p.Decision.Allowed
		}()
	}
	wg.Wait()
	for w, err := range errs {
		if errors.Is(err, ErrAttemptsExhausted) {
			exhausted++
		} else if err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
		if allowed[w] {
			admitted++
		}
	}
	// Whatever happened, the key lives in one place now: a third request is denied.
	third, err := NewTable(TableConfig{Store: mem, Prefix: "rl|race|", Slots: c.maxKeys, Attempts: 8, Limiter: lim, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	var p Pending
	if err := third.AllowN(raceKey, max(c.now[0], c.now[1]), 1, &p); err != nil {
		t.Fatal(err)
	}
	if p.Decision.Allowed {
		admitted++
	}
	return admitted, exhausted, sched.ops
}

// Two workers deciding the same new key at the same moment admit exactly the limit, however
// their reads and writes interleave: every schedule with two context switches is run. No
// schedule denies a request as contention either: in these schedules each worker's write can
// lose at most the few races the other's one request causes, far fewer than its attempts, so
// exhausting them would mean a worker waited on the other (a paused claimant, for one; see
// create).
func TestNewKeyRaceEveryInterleaving(t *testing.T) {
	for _, c := range raceCases {
		t.Run(c.name, func(t *testing.T) {
			// Worker 1 alone first, to learn how many operations a request makes.
			_, _, solo := runRace(t, c, 1<<30, 0)
			runs, bad, contended := 0, 0, 0
			for i := 0; i <= solo[1]; i++ {
				for j := 0; j <= solo[1]+solo[0]; j++ {
					admitted, exhausted, _ := runRace(t, c, i, j)
					runs++
					if exhausted > 0 {
						contended++
						if contended <= 3 {
							t.Errorf("schedule (%d, %d): %d requests denied as contention", i, j, exhausted)
						}
					}
					if admitted != 1 {
						bad++
						if bad <= 3 {
							t.Errorf("schedule (%d, %d): %d requests admitted, want 1 (the limit)", i, j, admitted)
						}
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d schedules over-admitted", bad, runs)
			}
			if contended > 0 {
				t.Errorf("%d of %d schedules denied a request as contention", contended, runs)
			}
			t.Logf("%d schedules", runs)
		})
	}
}

// claimAt writes a claim of raceKey, made at clock at by another table, in the key's first
// slot of a max_keys 5 table (one bucket).
func claimAt(t *testing.T, store Store, tab *Table, at int64) {
	t.Helper()
	d := Digest(raceKey)
	b, start := tab.cur.choices(sipHash24(tab.k0, tab.k1, d[:]))
	v := append(d[:], slotClaim)
	v = binary.LittleEndian.AppendUint64(v, uint64(at))
	v = binary.LittleEndian.AppendUint64(v, tab.id+1)
	if err := store.Set(string(appendName(nil, tab.prefix, tab.cur.maxKeys, b[0]*BucketSlots+start[0])), v, 0); err != nil {
		t.Fatal(err)
	}
}

// A lookup that meets another worker's claim of its key, and no live copy, adopts the claim:
// its decision is written into the claim's slot (no other slot is created, and the claimant's
// count of created slots is not counted again), and the next request decides on that state.
func TestLookupAdoptsAFreshClaim(t *testing.T) {
	mem := NewMemory()
	tab := mustTable(t, mem, 5, mustLimiter(t, algorithms.Config{Algorithm: "fixed_window", Limit: 10, Window: time.Hour}))
	claimAt(t, mem, tab, 0)
	before := mem.Len()
	var p Pending
	for i := range 2 {
		if err := tab.AllowN(raceKey, claimTTL, 1, &p); err != nil || !p.Decision.Allowed || p.Decision.Remaining != int64(9-i) {
			t.Fatalf("request %d: %v, %+v, want allowed with %d remaining", i, err, p.Decision, 9-i)
		}
	}
	if mem.Len() != before || p.Overflow || tab.Used() != 0 {
		t.Fatalf("the claim's slot was not the one written: %d new entries, overflow %v, created %d", mem.Len()-before, p.Overflow, tab.Used())
	}
	d := Digest(raceKey)
	b, start := tab.cur.choices(sipHash24(tab.k0, tab.k1, d[:]))
	v, _, err := mem.Get(string(appendName(nil, tab.prefix, tab.cur.maxKeys, b[0]*BucketSlots+start[0])))
	if err != nil || len(v) < slotHeader || v[DigestSize] != slotLive {
		t.Fatalf("the claimed slot holds %v (%v), want the key's live state", v, err)
	}
}

// pausingStore pauses its worker at the first Set of a claim, until the test lets it go.
type pausingStore struct {
	Store
	paused, resume chan struct{}
	once           sync.Once
}

func (s *pausingStore) Set(key string, value []byte, cas uint32) error {
	err := s.Store.Set(key, value, cas)
	if len(value) == claimSize && value[DigestSize] == slotClaim {
		s.once.Do(func() {
			close(s.paused)
			<-s.resume
		})
	}
	return err
}

// A worker paused between writing its claim of a new key and converting it (in Envoy, a
// worker thread the kernel descheduled) must not make other workers' requests for that key
// fail: they adopt the claim and are decided, and the claimant, resumed, decides again on the
// state they wrote. The key lives in one slot, and exactly the limit is admitted. Before
// adoption, the other worker spent all its attempts waiting for the claim and was denied as
// contention (ErrAttemptsExhausted).
func TestPausedClaimantBlocksNobody(t *testing.T) {
	for _, c := range []struct {
		name    string
		maxKeys uint32
		cfg     algorithms.Config
	}{
		{"fixed window, one bucket", 5, algorithms.Config{Algorithm: "fixed_window", Limit: 3, Window: time.Hour}},
		{"gcra, two buckets", 1000, algorithms.Config{Algorithm: "gcra", Limit: 3, Window: time.Hour}},
		{"leaky bucket, max_keys 1", 1, algorithms.Config{Algorithm: "leaky_bucket", Limit: 3, Window: time.Hour}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := NewMemory()
			secret, err := LoadSecret(mem)
			if err != nil {
				t.Fatal(err)
			}
			lim := mustLimiter(t, c.cfg)
			ps := &pausingStore{Store: mem, paused: make(chan struct{}), resume: make(chan struct{})}
			newTab := func(s Store) *Table {
				tab, err := NewTable(TableConfig{Store: s, Prefix: "rl|pause|", Slots: c.maxKeys, Attempts: 8, Limiter: lim, Secret: secret})
				if err != nil {
					t.Fatal(err)
				}
				return tab
			}
			claimant, other := newTab(ps), newTab(mem)
			done := make(chan error, 1)
			var cp Pending
			go func() { done <- claimant.AllowN(raceKey, 0, 1, &cp) }()
			<-ps.paused
			admitted := 0
			var p Pending
			if err := other.AllowN(raceKey, 0, 1, &p); err != nil {
				t.Fatalf("the other worker's request, with the claimant paused: %v", err)
			}
			if p.Decision.Allowed {
				admitted++
			}
			close(ps.resume)
			if err := <-done; err != nil {
				t.Fatalf("the claimant's request: %v", err)
			}
			if cp.Decision.Allowed {
				admitted++
			}
			if cp.Retries == 0 {
				t.Fatal("the claimant's conversion succeeded over the adopter's: the key was written twice")
			}
			// The key lives in one place: the rest of the limit, then denials.
			for i := range 3 {
				if err := newTab(mem).AllowN(raceKey, 0, 1, &p); err != nil {
					t.Fatal(err)
				}
				if p.Decision.Allowed {
					admitted++
				}
				t.Logf("request %d: %+v", i+3, p.Decision)
			}
			if admitted != 3 {
				t.Fatalf("%d of 5 requests admitted, want the limit, 3", admitted)
			}
		})
	}
}

// A claim older than claimTTL was left by a VM that stopped between writing and settling it:
// it blocks nobody, and the key is created there (its lookup adopts the claim).
func TestStaleClaimBlocksNobody(t *testing.T) {
	mem := NewMemory()
	tab := mustTable(t, mem, 5, mustLimiter(t, algorithms.Config{Algorithm: "fixed_window", Limit: 10, Window: time.Hour}))
	claimAt(t, mem, tab, 0)
	var p Pending
	for i := range 2 {
		if err := tab.AllowN(raceKey, claimTTL+1, 1, &p); err != nil || !p.Decision.Allowed || p.Decision.Remaining != int64(8-i)+1 {
			t.Fatalf("request %d: %v, %+v", i, err, p.Decision)
		}
	}
	if p.Overflow || tab.Used() != 0 {
		t.Fatalf("the stale claim's slot was not reused: overflow %v, created %d", p.Overflow, tab.Used())
	}
}

// Many workers creating the same new keys at once, while other keys are being created around
// them (so the load of a key's two buckets changes between one worker's reads and another's):
// every key is admitted exactly once, its limit.
//
//	go test -count=1 -run TestNewKeysExactUnderConcurrency -v ./sharedstate/
func TestNewKeysExactUnderConcurrency(t *testing.T) {
	const workers, keys = 8, 400
	mem := NewMemory()
	lim := mustLimiter(t, algorithms.Config{Algorithm: "token_bucket", Limit: 1, Window: time.Hour})
	var admitted, exhausted [workers]int
	var wg sync.WaitGroup
	for w := range workers {
		tab := mustTable(t, mem, 2*keys, lim)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var p Pending
			for i := range keys {
				key := []byte("client-" + strconv.Itoa(i))
				err := tab.AllowN(key, 0, 1, &p)
				switch {
				case errors.Is(err, ErrAttemptsExhausted):
					exhausted[w]++
				case err != nil:
					t.Error(err)
					return
				case p.Decision.Allowed:
					admitted[w]++
				}
			}
		}()
	}
	wg.Wait()
	total, lost := 0, 0
	for w := range workers {
		total += admitted[w]
		lost += exhausted[w]
	}
	t.Logf("%d workers, %d new keys each requested by every worker: %d admitted, %d denied for contention", workers, keys, total, lost)
	if total > keys {
		t.Fatalf("%d requests admitted, want at most %d (one per key)", total, keys)
	}
	// A key whose every request lost its races admits nobody: the rest is exact.
	if total+lost < keys {
		t.Fatalf("%d admitted + %d contention denials < %d keys", total, lost, keys)
	}
}
