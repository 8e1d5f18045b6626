package sharedstate

import (
	"errors"
	"strconv"
	"strings"
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
		// A key-less rule has max_keys 1: one group of one slot.
		name: "max_keys 1, empty table", maxKeys: 1,
		cfg: algorithms.Config{Algorithm: "fixed_window", Limit: 1, Window: time.Minute},
	},
	{
		// Two workers whose clocks are a nanosecond apart see the key's home slot held by
		// another key that goes idle in between: one places the new key in a free slot, the
		// other in the home slot, evicting the idle key; the index decides which.
		name: "a neighbour goes idle between the workers' reads", maxKeys: 5,
		cfg: algorithms.Config{Algorithm: "token_bucket", Limit: 1, Window: time.Hour},
		now: [2]int64{int64(time.Hour), int64(time.Hour) - 1},
		setup: func(t *testing.T, store Store, secret [SecretSize]byte, lim Limiter) {
			// client-b spent its token at 0, in the key's home slot: idle again at exactly one
			// hour.
			_, state := lim.AllowN(nil, 0, 1)
			putOther(t, store, secret, "rl|race|", 5, string(raceKey), "client-b", 0, state)
		},
	},
	{
		name: "two groups, empty table", maxKeys: 1000,
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
// exhausting them would mean a worker waited on the other (a paused placer, for one; see
// TestPausedPlacerBlocksNobody).
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

// A worker paused between writing a new key's index entry and its slot delays nobody: the
// next request finds the entry, takes the slot as the key's with a fresh state (it does not
// hold the key's digest yet), and writes it; the paused worker's slot write then fails and it
// decides again on that state. The key admits exactly its limit.
func TestPausedPlacerBlocksNobody(t *testing.T) {
	mem := NewMemory()
	lim := mustLimiter(t, algorithms.Config{Algorithm: "fixed_window", Limit: 2, Window: time.Hour})
	hs := &holdSlotStore{Store: mem, held: make(chan struct{}), resume: make(chan struct{})}
	paused := mustTable(t, hs, 5, lim)
	other := mustTable(t, mem, 5, lim)
	hs.on = true
	done := make(chan error, 1)
	var pp Pending
	go func() { done <- paused.AllowN(raceKey, 0, 1, &pp) }()
	<-hs.held
	var p Pending
	admitted := 0
	for range 3 {
		if err := other.AllowN(raceKey, 0, 1, &p); err != nil {
			t.Fatal(err)
		}
		if p.Decision.Allowed {
			admitted++
		}
		if p.Overflow || p.Retries != 0 {
			t.Fatalf("request while the placer is paused: overflow %v, retries %d", p.Overflow, p.Retries)
		}
	}
	close(hs.resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if pp.Decision.Allowed {
		admitted++
	}
	if admitted != 2 {
		t.Fatalf("%d admitted, want the limit, 2", admitted)
	}
	if !pp.Claimed || pp.Retries != 1 {
		t.Fatalf("the paused placer: claimed %v, retries %d; want its entry counted and one lost race", pp.Claimed, pp.Retries)
	}
}

// holdSlotStore holds its worker just before its first write of a slot (after the index
// entry), until the test lets it go.
type holdSlotStore struct {
	Store
	held, resume chan struct{}
	once         sync.Once
	on           bool // off while the tables are made
}

func (s *holdSlotStore) Set(key string, value []byte, cas uint32) error {
	if s.on && !strings.Contains(key, "#") {
		s.once.Do(func() {
			close(s.held)
			<-s.resume
		})
	}
	return s.Store.Set(key, value, cas)
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
