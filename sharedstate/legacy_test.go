package sharedstate

// legacyTable is a key table whose slot addressing is neither keyed nor bucketed: SHA-256
// digest bytes [8:16] little-endian mod max_keys, four consecutive probes, one overflow slot.
// It is a baseline in the tests only, so that benchmarks compare both tables in one run and
// the attack tests can compute keys that collide under an unkeyed formula.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strconv"
	"unsafe"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

const legacyProbes = 4

// Table keeps the state of one rule's keys in a bounded number of shared-data slots.
//
// A key's digest picks a home slot; the key lives in the first of legacyProbes consecutive slots that
// either already holds its digest, was never written, or holds another key whose state is idle
// (back at full allowance, so handing its slot over changes nobody's allowance). A key that
// finds all of its slots held by active keys is counted in one overflow slot shared by every such
// key: a flood of new keys (for example spoofed or rotating client addresses) is then limited as
// one client, and can neither grow memory nor evict an active client and so reset its limit.
//
// Memory is bounded by Slots+1 keys of at most prefix+10+DigestSize+state bytes each.
//
// A Table is not safe for concurrent use: each worker VM (single-threaded) has its own, and
// they share the slots through the Store.
type legacyTable struct {
	store    Store
	prefix   string
	slots    uint32
	attempts int
	limiter  Limiter
	// names caches the slot key strings, built on first use: a request's slot is usually one
	// it has used before, and building the string costs an allocation every time. The bytes
	// of every name built so far are in nameBytes, and names[i] is 1 + where slot i's name
	// starts there (0: not built yet). Neither holds a pointer, so the garbage collector
	// does not scan them: a []string with one entry per slot (10,000 by default) would be a
	// large share of the collector's marking work on every cycle, which in a Wasm VM the
	// requests pay for.
	names     []uint32
	nameBytes []byte
	overflow  string
}

// legacyTableConfig configures a Table.
type legacyTableConfig struct {
	// Store holds the slots, usually Host{}.
	Store Store
	// Prefix namespaces the slots, e.g. "rl|api|"; it must be unique per rule.
	Prefix string
	// Slots is the number of distinct keys tracked (at least 1).
	Slots uint32
	// Attempts bounds the compare-and-swap loop (at least 1).
	Attempts int
	// Limiter is the rule's algorithm.
	Limiter Limiter
}

// newLegacyTable returns a Table for c.
func newLegacyTable(c legacyTableConfig) (*legacyTable, error) {
	switch {
	case c.Store == nil:
		return nil, errors.New("sharedstate: nil store")
	case c.Limiter == nil:
		return nil, errors.New("sharedstate: nil limiter")
	case c.Slots == 0:
		return nil, errors.New("sharedstate: slots must be at least 1")
	case c.Attempts < 1:
		return nil, errors.New("sharedstate: attempts must be at least 1")
	}
	return &legacyTable{store: c.Store, prefix: c.Prefix, slots: c.Slots, attempts: c.Attempts, limiter: c.Limiter,
		overflow: c.Prefix + "overflow"}, nil
}

// legacyPending is a decision that has been made but not yet written. Deciding every rule of a request
// before writing any of them means a request denied by a later rule consumes nothing of an
// earlier one. A legacyPending is reused across requests to avoid allocations.
type legacyPending struct {
	// Decision is the outcome; it may change when Commit has to decide again after a race.
	Decision algorithms.Decision
	// Retries counts compare-and-swap attempts lost so far.
	Retries int
	// Overflow reports that the key found no slot of its own and is counted in the overflow slot.
	Overflow bool

	digest [DigestSize]byte
	now, n int64
	slot   string
	cas    uint32
	value  []byte
}

// Decide reads the key's state and decides whether n events may pass at now. Nothing is written.
func (t *legacyTable) Decide(key []byte, now, n int64, p *legacyPending) error {
	sum := sha256.Sum256(key)
	p.digest = [DigestSize]byte(sum[:DigestSize])
	p.now, p.n, p.Retries = now, n, 0
	return t.decide(p)
}

// Commit writes an allowed decision with compare-and-swap. When another worker wrote the slot
// since Decide read it, the decision is made again on the fresh state (it may now be a denial)
// and written again, at most Attempts times in all. A denial is never written: a denied request
// consumes nothing.
func (t *legacyTable) Commit(p *legacyPending) error {
	for {
		if !p.Decision.Allowed {
			return nil
		}
		err := t.store.Set(p.slot, p.value, p.cas)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrCasMismatch) {
			return err
		}
		p.Retries++
		if p.Retries >= t.attempts {
			return ErrAttemptsExhausted
		}
		if err := t.decide(p); err != nil {
			return err
		}
	}
}

// AllowN decides and commits in one step, for a rule that is the only one on its request.
func (t *legacyTable) AllowN(key []byte, now, n int64, p *legacyPending) error {
	if err := t.Decide(key, now, n, p); err != nil {
		return err
	}
	return t.Commit(p)
}

// decide finds the key's slot (see Table) and runs the limiter on its state.
func (t *legacyTable) decide(p *legacyPending) error {
	p.Overflow = false
	home := binary.LittleEndian.Uint64(p.digest[8:]) % uint64(t.slots)
	free := -1
	var freeCas uint32
	probes := min(uint64(legacyProbes), uint64(t.slots))
	for i := uint64(0); i < probes; i++ {
		slot := t.slotKey((home + i) % uint64(t.slots))
		v, cas, err := t.store.Get(slot)
		if isNotFound(err) {
			// Slots are never deleted, so a slot that was never written ends the probe
			// sequence: the key cannot live beyond it.
			if free < 0 {
				p.slot, p.cas = slot, createCAS
				return t.run(p, nil)
			}
			break
		}
		if err != nil {
			return err
		}
		if len(v) >= DigestSize && [DigestSize]byte(v[:DigestSize]) == p.digest {
			p.slot, p.cas = slot, cas
			return t.run(p, v[DigestSize:])
		}
		if free < 0 && (len(v) < DigestSize || t.limiter.Idle(v[DigestSize:], p.now)) {
			// A slot too short to hold a digest is corrupt; like an idle one it holds no
			// allowance worth keeping.
			free, freeCas = int(i), cas
		}
	}
	if free >= 0 {
		p.slot, p.cas = t.slotKey((home+uint64(free))%uint64(t.slots)), freeCas
		return t.run(p, nil)
	}
	p.Overflow = true
	p.slot = t.overflow
	v, cas, err := t.store.Get(p.slot)
	switch {
	case isNotFound(err):
		p.cas = createCAS
		return t.run(p, nil)
	case err != nil:
		return err
	}
	p.cas = cas
	if len(v) < DigestSize {
		return t.run(p, nil)
	}
	return t.run(p, v[DigestSize:])
}

// run applies the limiter to state and prepares the value to write: digest then state.
func (t *legacyTable) run(p *legacyPending, state []byte) error {
	d, next := t.limiter.AllowN(state, p.now, p.n)
	p.Decision = d
	p.value = append(p.value[:0], p.digest[:]...)
	p.value = append(p.value, next...)
	return nil
}

func (t *legacyTable) slotKey(i uint64) string {
	if t.names == nil {
		t.names = make([]uint32, t.slots)
	}
	start := int(t.names[i]) - 1
	if start < 0 {
		start = len(t.nameBytes)
		t.nameBytes = append(t.nameBytes, t.prefix...)
		t.nameBytes = strconv.AppendUint(t.nameBytes, i, 10)
		t.names[i] = uint32(start + 1)
	}
	// The name's bytes are never written again (nameBytes only grows, and a reallocation
	// leaves the old array to the strings that point into it), so the string can share them.
	name := t.nameBytes[start : start+len(t.prefix)+legacyDecimalLen(i)]
	return unsafe.String(&name[0], len(name))
}

// legacyDecimalLen returns the number of decimal digits of i.
func legacyDecimalLen(i uint64) int {
	n := 1
	for ; i >= 10; i /= 10 {
		n++
	}
	return n
}
