package sharedstate

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"unsafe"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
	"github.com/ratelimit-wasm/ratelimit/internal/duration"
)

// Limiter is what a Table needs from an algorithm: a pure decision over encoded state, and a
// way to tell that a state is back at its full allowance (so its slot may be given to another
// key without granting anybody anything).
type Limiter interface {
	AllowN(state []byte, now, n int64) (algorithms.Decision, []byte)
	Idle(state []byte, now int64) bool
}

// DigestSize is the length of the key digest stored in front of every slot's state. 128 bits of
// SHA-256 make a collision between two client-chosen keys infeasible, which matters because a
// collision would let one client spend another's allowance.
const DigestSize = 16

// BucketSlots is the number of consecutive slots in a bucket. A key may live in any slot of
// two buckets chosen by the keyed hash (see Table).
const BucketSlots = 8

// Choices is the number of buckets a key may live in.
const Choices = 2

// PhysicalPerKey is the physical address space per configured key, as a fraction: a table
// for max_keys keys spreads them over ceil(max_keys * 3/2 / BucketSlots) buckets, so that two
// choices still find room when the table holds 90% of max_keys (see Table). Slots are only
// created in shared data when a key is first stored in them, and at most max_keys of them are
// ever created, so the extra address space costs no memory.
const (
	PhysicalPerKeyNum = 3
	PhysicalPerKeyDen = 2
)

// OverflowSlots is the number of overflow slots per rule. A key that finds no room is counted
// in one of them, chosen by the keyed hash, so a flood that drains some overflow slots leaves
// the others to the new clients that hash there (see Table).
const OverflowSlots = 64

// maxGeometries is how many table geometries (distinct max_keys values) a rule remembers, the
// current one included: a key that is not found in the current geometry is looked for in the
// others, so its state survives changes of max_keys. A key's state lives in the layout of its
// last admitted request (or in a forward's copy there), so it is lost only when more than
// maxGeometries-1 other max_keys values are configured while the key is still active (before
// its allowance is back in full) and not admitted in between. The cost of a longer list is
// paid by keys absent from the current layout only (a new key's first lookup, a key in an
// overflow slot): up to 2*BucketSlots reads per previous layout; the list itself is 4 bytes
// per layout, read once per configuration.
const maxGeometries = 8

// maxHops bounds how many "moved" forwards a lookup follows (see Table).
const maxHops = 2

// Kinds of slot value, the byte after the digest.
const (
	slotLive     = 0 // the key's state follows
	slotMoved    = 1 // the key moved to another geometry: its max_keys (4 bytes LE), then its state
	slotClaim    = 2 // a worker is creating the key here: its clock (8 bytes LE), its table id (8)
	slotReleased = 3 // a claim that lost (see Table): the slot is free
)

// slotHeader is the length of a live slot's value before the state: digest and kind.
const slotHeader = DigestSize + 1

// movedHeader is the length of a moved slot's value before the state.
const movedHeader = slotHeader + 4

// claimSize is the length of a claim: digest, kind, the claimant's clock and its table id.
const claimSize = slotHeader + 8 + 8

// claimTTL is how long a claim holds its slot against other keys, and wins over a claim of its
// key written later in another slot (see create). A claim lives for the few store operations
// between its write and its conversion into a live slot; one older than this (by the reader's
// clock) was left by a VM that stopped in between, and counts as free for another key, so a
// slot is never blocked for good. A lookup of the claim's own key adopts it whatever its age
// (see scan). Taking a slot from a claimant that is merely slow is safe: its conversion is
// a compare-and-swap against its claim and fails.
const claimTTL = int64(duration.Second)

// createCAS is the CAS number that creates a slot that did not exist. Envoy lets a Set of a
// missing key succeed whatever its cas, but a Set with cas 0 would also blindly overwrite a slot
// another worker created in the meantime. Any non-zero cas avoids that; the largest one is
// chosen because the only way it can still match is that the slot's CAS number is exactly
// 2^32-1 at that moment, which happens once per 4 billion writes in the whole process.
const createCAS = math.MaxUint32

// SecretKey is the shared-data key of the process-wide slot-addressing secret (see
// LoadSecret). Rule prefixes end in '|' and every slot name continues after it, so no slot of
// any rule can be named like this.
const SecretKey = "ratelimit|secret"

// SecretSize is the size of the slot-addressing secret: a SipHash-2-4 key.
const SecretSize = 16

// ErrAttemptsExhausted means every compare-and-swap attempt lost a race. That is contention,
// not a store failure: the filter denies the request (see the filter package), so losing races
// can never admit a request beyond the limit.
var ErrAttemptsExhausted = errors.New("sharedstate: compare-and-swap attempts exhausted")

// nameCacheSize is the number of slot names a Table keeps per VM (see Table.name).
const nameCacheSize = 256

// TableVMBytes is an upper bound of what one Table holds in a VM's memory, whatever its
// max_keys: the name cache (nameCacheSize names of at most 64+1+10+1+10 bytes, plus their
// string and index headers), the scratch buffers and the struct itself. It does not grow with
// the number of keys.
const TableVMBytes = nameCacheSize*(86+16+8) + 2*512 + 256

// SharedBytesPerKey is the worst-case number of shared-data bytes one stored key of a rule
// costs: its slot name (the rule's prefix, the geometry and the slot number) and its value
// (digest, kind, forward, state), plus envoyEntryOverhead for Envoy's own bookkeeping of an
// entry (the map node, two std::string headers and the cas number). A configure-time
// memory budget multiplies it by max_keys + OverflowSlots + 3 per rule.
func SharedBytesPerKey(prefixLen, maxStateLen int) int {
	return prefixLen + 10 + 1 + 10 + movedHeader + maxStateLen + envoyEntryOverhead
}

// envoyEntryOverhead is an estimate of what Envoy's shared data spends per entry beyond the
// key and value bytes: an unordered_map node with two std::string and a uint32 cas.
const envoyEntryOverhead = 128

// LoadSecret returns the process-wide secret that keys slot addressing, creating it at the
// first start of the process: every worker VM must agree on it, so it lives in shared data.
// A VM that finds no secret draws 16 random bytes and
// creates the entry with a non-zero CAS, so that of two VMs starting at once only one can
// create it; both then read back and use whatever won. A stored value of the wrong size
// (corrupted) is replaced the same way.
//
// The bytes come from math/rand/v2's global generator: since Go 1.22 it is ChaCha8 (per
// thread) keyed from the operating system's entropy (random_get on wasip1) and not
// predictable from its output, which is what a SipHash key needs. crypto/rand reads the same
// entropy but links Go's FIPS 140 module (with crypto/sha256, about 0.2 MB of the .wasm). One
// difference: were random_get to fail at start-up, the runtime would seed from the clock where
// crypto/rand returned an error; Envoy's random_get (a host CSPRNG) does not fail.
func LoadSecret(store Store) (secret [SecretSize]byte, err error) {
	for range 16 {
		v, cas, err := store.Get(SecretKey)
		switch {
		case err == nil && len(v) == SecretSize:
			return [SecretSize]byte(v), nil
		case err == nil:
			// Corrupt: replace it, but only if nobody else did in the meantime.
		case isNotFound(err):
			cas = createCAS
		default:
			return secret, err
		}
		var fresh [SecretSize]byte
		randomBytes(fresh[:])
		if err := store.Set(SecretKey, fresh[:], cas); err != nil && !errors.Is(err, ErrCasMismatch) {
			return secret, err
		}
		// Whether this VM's write won or another's did, the stored value is the one to use.
	}
	return secret, errors.New("sharedstate: the slot-addressing secret could not be created")
}

// Table keeps the state of one rule's keys in a bounded number of shared-data slots.
//
// # Addressing
//
// A key is known by its digest (the first 16 bytes of SHA-256 of the key, stored in front of
// its state; see Digest). Where it may live is decided by SipHash-2-4 of the digest under a
// secret that every VM of the process shares and no client sees (LoadSecret): the 64-bit
// output picks two buckets of BucketSlots consecutive slots, a starting slot within each,
// and an overflow slot. Without the secret nobody can compute which keys share slots, so
// colliding keys cannot be searched for offline.
//
// The rule has max_keys keys of room, spread over ceil(1.5 * max_keys / BucketSlots) buckets.
// A key is looked up at its starting slot of the first bucket, then of the second, then in the
// rest of both: an established key is usually found with one read. A new key goes to the
// bucket with fewer active keys (two choices: the load stays even, so a bucket rarely fills
// before the table does), at the first free slot from its starting slot. A slot is free when
// it was never written, holds corrupt bytes, or holds a key whose state is idle (back at full
// allowance: handing its slot over changes nobody's allowance). Active keys are never evicted.
// Never-written slots are only claimed while the rule's shared counter of created slots is
// below max_keys, so shared data holds at most max_keys slots per rule (plus a few between
// the counter's read and its update by concurrent VMs), however many keys clients invent.
// With one-request clients, no new key is refused before the table holds 90% of max_keys
// (TestTableFalseDenialCurve; the curve is in the README).
//
// # One copy per key, whatever the workers do at once
//
// Every write is a compare-and-swap against the value read, so a slot is never claimed by two
// keys, and an active key is never overwritten. Two workers creating the same new key at the
// same moment could still pick two different free slots (their clocks differ, so one sees a
// neighbour idle that the other sees active; or one saw a bucket's load change in between),
// and both writes would succeed: two copies, each admitting up to the limit. So a new key is
// created through a claim (see create): the claim is written, the key's other slots are
// checked for another copy, and only then does the claim become the key's state; of two
// claims the one first in lookup order wins, and a live copy wins over any claim. A lookup
// that meets a claim of its key and no live copy adopts it: it checks the other slots as the
// claimant does and writes its own decision into the claim, by compare-and-swap, so a worker
// paused mid-way delays nobody (see create). A claim of another key older than claimTTL
// counts as free; a claim of the key is adopted whatever its age (see scan). A
// key is sent to overflow only on slots read after the count of created slots said full, so
// a worker never sees the key's slot empty, then the count full because another worker just
// created the key there, and counts the key in an overflow slot as well (see scan).
// TestNewKeyRaceEveryInterleaving runs two workers' first requests in every schedule with
// two context switches and admits exactly the limit; TestNewKeyRaceRandomSchedules and
// TestNewKeyRaceBoundedSchedules do the same with three or four workers, claimants and
// adopters, in random schedules and in every schedule with one preemption.
//
// # Overflow
//
// A key that finds no free slot in its buckets is counted in one of OverflowSlots overflow
// slots, chosen by its keyed hash; each overflow slot is limited like one client. A flood of
// new keys can drain at most R/limit overflow slots with R overflowing requests per window,
// and a new client is refused only when its own overflow slot is drained: the share of
// overflowing new clients that a flood locks out is at most R / (OverflowSlots * limit), and
// locking out all of them costs OverflowSlots times what draining one slot costs. A key in
// overflow takes a slot of its own as soon as one in its buckets is free (an idle neighbour,
// or a slot created by a worker that read the count before the table filled), and starts
// there afresh: what it spent in the shared overflow slot stays there.
//
// # Geometry changes
//
// Slot names carry the geometry (max_keys), and the table records the rule's geometries in
// shared data, newest first. A key that is not found in the current geometry is looked for in
// the previous ones; found there with active state, that slot is replaced, by compare-and-swap,
// with a forward ("moved to max_keys M") that keeps a copy of the state, and the state is
// stored in the current geometry. A VM still running the previous configuration (Envoy runs
// old and new VMs side by side during a configuration update) that reads the forward follows
// it and updates the key where it now lives, so old and new VMs count each key in one place.
// If the new geometry has no room for the key, it stays in its old slot. Whether there is room
// can change while the key moves (another key fills the table, a neighbour goes idle), so a
// worker creating the key in the new geometry from a forward's copy rewrites the forward after
// its claim, and a worker that finds no room looks at the new geometry again after reading the
// forward: the key never becomes live both there and in the forward's slot (see
// touchForward). A forward whose copy
// has not made it into the new geometry (the request was denied by another rule, or the
// write lost a race) is revived from the copy by the next lookup. Claims settle a key's copies
// within one geometry only: a VM of the previous configuration creating a key in its geometry
// while a new VM creates it in the new one can leave the key counted twice, in two places,
// until the old VMs are gone.
//
// A Table is not safe for concurrent use: each worker VM (single-threaded) has its own, and
// they share the slots through the Store.
type Table struct {
	store    Store
	prefix   string
	attempts int
	limiter  Limiter
	digests  *DigestCache
	k0, k1   uint64
	// id tells this Table's claims from other workers' (see create).
	id uint64

	cur  geometry
	prev []geometry

	// names caches slot names (see name). It is allocated by Warm or on first use, and never
	// grows.
	// An array behind a pointer, not a slice: an index below nameCacheSize needs no bounds
	// check.
	names *[nameCacheSize]nameEntry
	// first is the read of a key's first slot that decide made and did not decide on,
	// for the full lookup that follows to take instead of reading the slot again.
	first firstRead
	// scratch holds the name of the slot being read: a Get does not keep its key, so the
	// reads of a lookup need no string of their own.
	scratch []byte
	// claim holds the claim being written, or its release (see create). An array, not a
	// slice: writing it needs no growth check and no write barrier.
	claim [claimSize]byte
	// count holds the count of created slots being written (see countCreated): a Set does not
	// keep its value.
	count [4]byte
}

// geometry is one table layout: the max_keys it was sized for and the buckets that follow.
type geometry struct {
	maxKeys uint32
	buckets uint32
}

func newGeometry(maxKeys uint32) geometry {
	phys := (uint64(maxKeys)*PhysicalPerKeyNum + PhysicalPerKeyDen - 1) / PhysicalPerKeyDen
	return geometry{maxKeys: maxKeys, buckets: uint32(max((phys+BucketSlots-1)/BucketSlots, 1))}
}

type nameEntry struct {
	geo, idx uint32
	name     string
}

// TableConfig configures a Table.
type TableConfig struct {
	// Store holds the slots, usually Host{}.
	Store Store
	// Prefix namespaces the slots, e.g. "rl|api|"; it must be unique per rule.
	Prefix string
	// Slots is max_keys: the number of distinct keys tracked (at least 1).
	Slots uint32
	// Attempts bounds the compare-and-swap loop (at least 1).
	Attempts int
	// Limiter is the rule's algorithm.
	Limiter Limiter
	// Digests, when set, caches key digests; the Tables of one VM can share one.
	Digests *DigestCache
	// Secret keys the slot addressing (see LoadSecret). Every VM of a process must use the
	// same one; the zero value works but is public, so clients could predict slots.
	Secret [SecretSize]byte
}

// NewTable returns a Table for c. It records the table's geometry in the store, so that a later
// configuration with another max_keys finds the keys stored under this one.
func NewTable(c TableConfig) (*Table, error) {
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
	t := &Table{store: c.Store, prefix: c.Prefix, attempts: c.Attempts, limiter: c.Limiter, digests: c.Digests,
		k0: binary.LittleEndian.Uint64(c.Secret[:8]), k1: binary.LittleEndian.Uint64(c.Secret[8:]),
		cur: newGeometry(c.Slots)}
	t.id = rand.Uint64()
	prev, err := t.registerGeometry()
	if err != nil {
		return nil, err
	}
	for _, m := range prev {
		t.prev = append(t.prev, newGeometry(m))
	}
	return t, nil
}

// registerGeometry puts the current max_keys first in the rule's list of geometries and returns
// the others, newest first.
func (t *Table) registerGeometry() ([]uint32, error) {
	var others []uint32
	_, err := Update(t.store, t.prefix+"geometry", max(t.attempts, 8), func(v []byte) []byte {
		others = others[:0]
		for i := 0; i+4 <= len(v); i += 4 {
			if m := binary.LittleEndian.Uint32(v[i:]); m != 0 && m != t.cur.maxKeys && len(others) < maxGeometries-1 {
				others = append(others, m)
			}
		}
		if len(v) >= 4 && binary.LittleEndian.Uint32(v) == t.cur.maxKeys {
			return nil // already the current geometry: nothing to write
		}
		next := binary.LittleEndian.AppendUint32(nil, t.cur.maxKeys)
		for _, m := range others {
			next = binary.LittleEndian.AppendUint32(next, m)
		}
		return next
	})
	if err != nil {
		return nil, err
	}
	return others, nil
}

// Pending is a decision that has been made but not yet written. Deciding every rule of a request
// before writing any of them means a request denied by a later rule consumes nothing of an
// earlier one. A Pending is reused across requests to avoid allocations.
type Pending struct {
	// Decision is the outcome; it may change when Commit has to decide again after a race.
	Decision algorithms.Decision
	// Retries counts compare-and-swap attempts lost so far.
	Retries int
	// Overflow reports that the key found no slot of its own and is counted in an overflow slot.
	Overflow bool
	// Claimed reports that Commit created a slot that had never been written (with the key's
	// claim, see Table): the rule's count of created slots grew to Used (see Table.Used).
	Claimed bool
	// Used is the count of created slots after this claim, when Claimed is set.
	Used uint32

	digest [DigestSize]byte
	now, n int64
	// The slot to write: geo is its geometry's max_keys (0 for an overflow slot), idx its
	// number; fresh is set when it was never written; place is set when the key is not in it
	// yet, so that writing it creates the key (see create); adopt is set when the slot holds
	// another worker's claim of the key, which this request settles (see create).
	geo, idx uint32
	fresh    bool
	place    bool
	adopt    bool
	cas      uint32
	value    []byte
	// fwd, when not empty, is the forward (in slot fwdIdx of geometry fwdGeo) whose copy of
	// the state this creation started from, as read or written by the lookup (see create).
	fwd            []byte
	fwdGeo, fwdIdx uint32
	// h is the key's keyed hash.
	h uint64
}

// Decide reads the key's state and decides whether n events may pass at now. Only a key that
// moves to the current geometry writes (its forward, see Table); the decision is not written.
func (t *Table) Decide(key []byte, now, n int64, p *Pending) error {
	p.now, p.n, p.Retries, p.Claimed = now, n, 0, false
	return t.decide(p, key, true)
}

// Commit writes an allowed decision with compare-and-swap. When another worker wrote the slot
// since Decide read it, the decision is made again on the fresh state (it may now be a denial)
// and written again, at most Attempts times in all. A denial is never written: a denied request
// consumes nothing. ErrAttemptsExhausted means every attempt lost a race: the request must not
// be admitted uncounted.
func (t *Table) Commit(p *Pending) error {
	if !p.Decision.Allowed {
		return nil
	}
	var err error
	if p.place {
		err = t.create(p)
	} else {
		err = t.store.Set(t.name(p.geo, p.idx), p.value, p.cas)
	}
	if err == nil {
		return nil
	}
	return t.recommit(p, err)
}

// recommit is Commit after a write that failed with err: after a lost race it decides again
// and commits that decision (at most Attempts times in all, counting recursions). It is out
// of line, so that a request whose write succeeds does not compile it.
//
//go:noinline
func (t *Table) recommit(p *Pending, err error) error {
	if !errors.Is(err, ErrCasMismatch) {
		return err
	}
	p.Retries++
	if p.Retries >= t.attempts {
		return ErrAttemptsExhausted
	}
	if err := t.decide(p, nil, false); err != nil {
		return err
	}
	return t.Commit(p)
}

// AllowN decides and commits in one step, for a rule that is the only one on its request.
func (t *Table) AllowN(key []byte, now, n int64, p *Pending) error {
	if err := t.Decide(key, now, n, p); err != nil {
		return err
	}
	return t.Commit(p)
}

// decide finds the key's slot (see Table) and runs the limiter on its state.
//
// It first reads the slot where the common case, an established key, lives: live, not
// forwarded, in the first slot a lookup reads (the starting slot of its first bucket in the
// current geometry). It then decides exactly as decideIn would on that read, without the
// bookkeeping of a full lookup, which costs about a quarter of a microsecond per rule in a
// Wasm VM. A key is elsewhere when, as it was placed, its first bucket held more keys than its
// second or its starting slot was taken: in a table 60% full, about 4 keys in 10
// (TestDecideReadsEachSlotOnce), fewer in an emptier one. Then the read is kept in
// t.first, and the full lookup takes it as its own first read (scanWith): the slots are read
// once each and in the same order either way. The fast path is part of decide rather than a
// function of its own: one function is less code for V8 to compile on a first request.
//
// With hash, it first makes the digest of key and its hash (Decide); without, it decides
// again on p's (Commit after a lost race). Decide is a wrapper small enough to be inlined, so
// that V8 compiles one function for both.
func (t *Table) decide(p *Pending, key []byte, hash bool) error {
	if hash {
		// The key's hash is made here, once per decision: a retry in Commit decides again on
		// the same digest, and the cache gives rules that share the key one hash between them.
		p.digest, p.h = t.digests.digestHash(key, t.k0, t.k1)
	}
	h := p.h // SipHash-2-4 of p.digest under the table's secret
	g := t.cur
	b, start := g.choices(h)
	idx := b[0]*BucketSlots + start[0]
	v, cas, err := t.store.Get(t.transientName(g.maxKeys, idx))
	if err == nil && len(v) >= slotHeader && v[DigestSize] == slotLive && hasDigest(v, &p.digest) {
		p.Overflow, p.fresh, p.place, p.adopt, p.fwd = false, false, false, false, p.fwd[:0]
		p.geo, p.idx, p.cas = g.maxKeys, idx, cas
		return t.run(p, v[slotHeader:])
	}
	t.first = firstRead{ok: true, geo: g.maxKeys, idx: idx, v: v, cas: cas, err: err}
	err = t.decideIn(p, g, h, nil, 0)
	t.first.ok = false // only the flag: clearing the rest is write barriers' code, for nothing
	return err
}

// hasDigest reports whether v, at least DigestSize bytes long, starts with d. It compares two
// 8-byte words: Go's wasm backend compiles a comparison of [DigestSize]byte values as a copy
// to the stack and a call of memequal, more code for V8 to compile in decide, which every
// request runs, and more time. Every comparison of a slot's digest with a key's goes through
// it.
func hasDigest(v []byte, d *[DigestSize]byte) bool {
	v = v[:DigestSize]
	return binary.LittleEndian.Uint64(v) == binary.LittleEndian.Uint64(d[:8]) &&
		binary.LittleEndian.Uint64(v[8:]) == binary.LittleEndian.Uint64(d[8:])
}

// firstRead is one read of a key's first slot (see decide). It is valid while ok is set; the
// other fields are left as they are when ok is cleared (v, a small buffer of the store's, is
// kept until the next read replaces it).
type firstRead struct {
	ok       bool
	geo, idx uint32
	v        []byte
	cas      uint32
	err      error
}

// scan is what a lookup learned about a key in one geometry.
type scan struct {
	found      bool   // the key's digest is in slot idx (cas)
	pending    bool   // another worker's claim of the key is in slot claimAt (claimCas)
	claimAt    uint32 // when pending: the first such claim in the order lookups read the slots
	claimCas   uint32
	moved      uint32 // when found: non-zero if the slot is a forward to this geometry
	state      []byte // when found: the key's state
	idx        uint32
	cas        uint32
	place      bool // a slot for the key: placeAt (placeCas), never written if placeFresh
	placeAt    uint32
	placeCas   uint32
	placeFresh bool
	placeClaim bool // placeAt holds another worker's claim of the key, to be adopted
}

// forward is a slot that forwards the key to another geometry (moved), with the copy of its
// state.
type forward struct {
	state         []byte
	geo, idx, cas uint32
	moved         uint32
}

// decideIn looks the key up in geometry g. from, when set, is the forward that led here: its
// copy is the state to start from when the key is absent from g.
//
// It holds only what the common lookups run: of a key that lives in g, and of a new key with
// room in g that has no previous layout to be looked for in. The rest (forwards, previous
// layouts, overflow) is in decideElsewhere, out of line (see filter/doc.go): a fresh VM's
// first request for a new key would otherwise compile all of it for nothing.
func (t *Table) decideIn(p *Pending, g geometry, h uint64, from *forward, hops int) error {
	p.Overflow, p.fresh, p.place, p.adopt, p.fwd = false, false, false, false, p.fwd[:0]
	var s scan // scan's, filled in place: returning it would copy the struct
	if err := t.scanWith(&s, g, h, p, scanPlace, -1); err != nil {
		return err
	}
	if !s.found && s.pending {
		// Another worker is creating the key and no live copy exists: the request adopts that
		// claim (see create) rather than wait for a worker that may be paused.
		s.place, s.placeAt, s.placeCas, s.placeFresh, s.placeClaim = true, s.claimAt, s.claimCas, false, true
	}
	var state []byte
	switch {
	case s.found && s.moved == 0:
		p.geo, p.idx, p.cas = g.maxKeys, s.idx, s.cas
		state = s.state
	case !s.found && s.place && from == nil && len(t.prev) == 0:
		// A new key with room here and no previous layout: what decideElsewhere decides in
		// this case, without the rest of its code.
		p.geo, p.idx, p.cas, p.fresh, p.place, p.adopt = g.maxKeys, s.placeAt, s.placeCas, s.placeFresh, true, s.placeClaim
	default:
		return t.decideElsewhere(p, g, h, &s, from, hops)
	}
	return t.run(p, state)
}

// decideElsewhere decides a key that is not live in geometry g (s is the scan of g). Found as
// a forward, it follows the forward, or, for a loop or one hop too many, decides on the
// forward's copy where it is. Absent, it is looked for in the previous layouts, moved here
// when there is room, and otherwise kept in its old slot or the forward's, or counted in
// overflow.
//
//go:noinline
func (t *Table) decideElsewhere(p *Pending, g geometry, h uint64, s *scan, from *forward, hops int) error {
	if s.found {
		if s.moved != g.maxKeys && hops < maxHops {
			return t.decideIn(p, newGeometry(s.moved), h, &forward{state: s.state, geo: g.maxKeys, idx: s.idx, cas: s.cas, moved: s.moved}, hops+1)
		}
		// A forward loop, or one too many: the copy is the best state there is, and it stays
		// where it is (the slot is written back as a live key).
		p.geo, p.idx, p.cas = g.maxKeys, s.idx, s.cas
		return t.run(p, s.state)
	}
	if from == nil && hops == 0 && g == t.cur {
		// Not here: the key may still live under a previous max_keys.
		var stale *forward // a forward to another previous layout, whose copy may be all there is
		for _, old := range t.prev {
			o, err := t.scan(old, h, p, false)
			if err != nil {
				return err
			}
			if !o.found {
				continue
			}
			if o.moved == g.maxKeys {
				// A forward here whose copy never arrived: revive it.
				from = &forward{state: o.state, geo: old.maxKeys, idx: o.idx, cas: o.cas, moved: o.moved}
				break
			}
			if o.moved != 0 {
				// A forward to another previous layout. The layouts are read newest first, so
				// a copy that arrived there has been read already; if none was, the request
				// that moved the key was denied (it wrote nothing) and this copy is the key's
				// state: revive it unless something newer turns up.
				if stale == nil && !t.limiter.Idle(o.state, p.now) {
					stale = &forward{state: o.state, geo: old.maxKeys, idx: o.idx, cas: o.cas, moved: o.moved}
				}
				continue
			}
			if t.limiter.Idle(o.state, p.now) {
				continue
			}
			if !s.place {
				// No room here: the key keeps living in its old slot.
				p.geo, p.idx, p.cas = old.maxKeys, o.idx, o.cas
				return t.run(p, o.state)
			}
			// Replace the old slot with a forward that keeps a copy, then store the state
			// here. Old VMs follow the forward; a lost race means the key changed: look again.
			p.fwd = appendForward(p.fwd[:0], p.digest, g.maxKeys, o.state)
			if err := t.store.Set(t.name(old.maxKeys, o.idx), p.fwd, o.cas); err != nil {
				p.fwd = p.fwd[:0]
				if !errors.Is(err, ErrCasMismatch) {
					return err
				}
				// The key changed: look it up again from the start, at most Attempts times in
				// all. The retry is here rather than a loop in decide, so that a new key's
				// first request does not compile it.
				p.Retries++
				if p.Retries >= t.attempts {
					return ErrAttemptsExhausted
				}
				return t.decideIn(p, t.cur, h, nil, 0)
			}
			p.fwdGeo, p.fwdIdx = old.maxKeys, o.idx
			p.geo, p.idx, p.cas, p.fresh, p.place, p.adopt = g.maxKeys, s.placeAt, s.placeCas, s.placeFresh, true, s.placeClaim
			return t.run(p, o.state)
		}
		if from == nil {
			from = stale
		}
		if from != nil && !s.place {
			// No room here, so the key would live on in the forward's slot: look here again
			// first, now that the forward has been read. A worker creating the key here from
			// the same forward claims after this read and then rewrites the forward (see
			// create), so either this lookup finds its claim or the write to the forward's
			// slot fails.
			return t.decideIn(p, g, h, from, hops+1)
		}
	}
	switch {
	case s.place && from != nil:
		p.fwd, p.fwdGeo, p.fwdIdx = appendForward(p.fwd[:0], p.digest, from.moved, from.state), from.geo, from.idx
		p.geo, p.idx, p.cas, p.fresh, p.place, p.adopt = g.maxKeys, s.placeAt, s.placeCas, s.placeFresh, true, s.placeClaim
		return t.run(p, from.state)
	case s.place:
		p.geo, p.idx, p.cas, p.fresh, p.place, p.adopt = g.maxKeys, s.placeAt, s.placeCas, s.placeFresh, true, s.placeClaim
		return t.run(p, nil)
	case from != nil:
		// No room where the forward points: the key lives on in the forward's slot, which
		// becomes a live slot again when the decision is written.
		p.geo, p.idx, p.cas = from.geo, from.idx, from.cas
		return t.run(p, from.state)
	}
	return t.overflow(p, h)
}

// create stores a key in a slot that does not hold it yet (p.place), so that every worker
// counts the key in one slot: a claim is written first, the key's other slots are checked for
// another copy, and only then is the claim turned into the key's live state.
//
//  1. The claim (digest, slotClaim, clock, table id) is written with compare-and-swap against
//     what the lookup read, and read back for its CAS number.
//  2. Every other slot of the key's two buckets is read. A live copy or a forward of the key
//     wins: this claim is released and the request decided again (it finds that copy). Another
//     worker's claim wins if it comes first in the order in which lookups read the slots;
//     otherwise it is released by compare-and-swap, and a claim that changed meanwhile is
//     read again.
//  3. The claim becomes the live state with compare-and-swap against the claim; a claim that
//     another worker released fails here, and the request is decided again.
//
// Of two workers creating one key, the one that writes its claim second reads the other's slot
// after that claim was written, and finds the claim, its live state, or its release; whichever
// it is, at most one of the two copies becomes live: one releases itself, or the winner releases
// the other's claim before the other's conversion (which then fails), or finds it converted and
// gives way.
//
// A lookup that meets another worker's claim of the key and no live copy adopts the claim
// (p.adopt): it skips step 1 and runs steps 2 and 3 on that claim, as read by its lookup. It
// never decides on a state that may not become the key's: its decision is written only by the
// conversion, a compare-and-swap against the claim it read. The claimant and every adopter
// read the key's other slots after the claim was written, so the argument above holds for each
// of them, and of all their conversions only the first succeeds (each changes the claim's CAS
// number); the others decide again, on the live state. So a worker paused between writing its
// claim and converting it (a descheduled thread) delays nobody. Were lookups to wait for the
// claimant instead, every other worker's request for the key would spend its attempts while
// the claimant is paused, and be denied as contention: a false 429
// (TestPausedClaimantBlocksNobody).
//
// A slot created by the claim is counted (countCreated) whether or not the claim wins: the
// slot exists either way. It is counted by its claimant, never by an adopter.
func (t *Table) create(p *Pending) error {
	name := t.name(p.geo, p.idx)
	cas := p.cas
	var err error
	if !p.adopt {
		// Step 1.
		copy(t.claim[:], p.digest[:])
		t.claim[DigestSize] = slotClaim
		binary.LittleEndian.PutUint64(t.claim[slotHeader:], uint64(p.now))
		binary.LittleEndian.PutUint64(t.claim[slotHeader+8:], t.id)
		if err := t.store.Set(name, t.claim[:], p.cas); err != nil {
			return err
		}
		var v []byte
		v, cas, err = t.store.Get(name)
		switch {
		case isNotFound(err):
			err = ErrCasMismatch
		case err != nil:
		case string(v) != string(t.claim[:]):
			// Released by a worker whose claim comes first: decide again.
			err = ErrCasMismatch
		}
	}
	if err == nil {
		// Steps 2 and 3, on the claim written or adopted.
		var lost bool
		if len(p.fwd) != 0 {
			// Only a key created from a forward's copy has a forward to rewrite: the test is
			// made here too, so that a new key's first request does not compile touchForward.
			lost, err = t.touchForward(p)
		}
		if err == nil && !lost {
			// Step 2 is scanWith's loop (scanVerify), which this request ran to find the
			// claim's slot: one loop for both is less code for V8 to compile on a new key's
			// first request, which runs both.
			var s scan
			err = t.scanWith(&s, newGeometry(p.geo), p.h, p, scanVerify, -1)
			lost = s.found
		}
		if err != nil || lost {
			err = t.release(p, name, cas, err)
		} else {
			err = t.store.Set(name, p.value, cas)
		}
	}
	if !p.adopt && p.fresh {
		// The slot exists now, whatever became of the claim: count it, last (a plain call,
		// not a deferred one, keeps defer's code out of the first request's).
		p.Claimed, p.Used = true, t.countCreated(p.geo)
	}
	return err
}

// release releases p's claim in slot name (cas) after it lost (err nil: the request is
// decided again) or failed (err), so that no lookup adopts it again; a failed release means
// another worker already released (or converted) it.
//
//go:noinline
func (t *Table) release(p *Pending, name string, cas uint32, err error) error {
	copy(t.claim[:], p.digest[:])
	t.claim[DigestSize] = slotReleased
	if rerr := t.store.Set(name, t.claim[:slotHeader], cas); rerr != nil && !errors.Is(rerr, ErrCasMismatch) && err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	return ErrCasMismatch
}

// appendForward appends to dst the value of a slot that forwards the key digest to geometry
// moved (its max_keys), with the copy of its state.
func appendForward(dst []byte, digest [DigestSize]byte, moved uint32, state []byte) []byte {
	dst = append(dst, digest[:]...)
	dst = append(dst, slotMoved)
	dst = binary.LittleEndian.AppendUint32(dst, moved)
	return append(dst, state...)
}

// touchForward rewrites, unchanged and by compare-and-swap, the forward whose copy p's state
// started from (p.fwd; nothing when empty), and reports whether the slot held another value.
// It runs after the claim is written (or adopted), before the conversion. A lookup that found
// no room for the key in the new layout writes the key's state into the forward's slot, by
// compare-and-swap against a read of the forward that it made before its last look at the new
// layout (see decideIn). That look came either after the claim, and found it, or before it:
// then the lookup's read of the forward came before this rewrite, so either its write lands
// first and this finds a live slot where the forward was (the claim loses and the request is
// decided again, on that state), or this rewrite lands first and that write fails. Without
// it, both copies would become live, each admitting on the same state
// (TestMovedKeyFillingTableCountsOnce). The forward is compared by value, not by CAS number:
// another claimant or adopter rewriting the same forward changes nothing.
func (t *Table) touchForward(p *Pending) (lost bool, err error) {
	if len(p.fwd) == 0 {
		return false, nil
	}
	name := t.name(p.fwdGeo, p.fwdIdx)
	for range t.attempts {
		v, cas, err := t.store.Get(name)
		switch {
		case isNotFound(err):
			return true, nil
		case err != nil:
			return true, err
		case string(v) != string(p.fwd):
			return true, nil
		}
		err = t.store.Set(name, v, cas)
		if err == nil {
			return false, nil
		}
		if !errors.Is(err, ErrCasMismatch) {
			return true, err
		}
	}
	return true, nil
}

// verifyCopy is create's step 2 (scanWith with scanVerify) for slot idx of p's geometry, written and read as v (cas number
// vcas): when it holds the key, it reports whether that copy wins over p's claim, and
// otherwise releases it if it is a claim, reading it again after a lost race. before tells
// that the slot comes before the claim in the lookups' order. The slots of a fresh table were
// never written, so a new key's first request there does not compile this.
//
//go:noinline
func (t *Table) verifyCopy(p *Pending, idx uint32, before bool, v []byte, vcas uint32) (lost bool, err error) {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			v, vcas, err = t.store.Get(t.transientName(p.geo, idx))
			if isNotFound(err) {
				return false, nil
			}
			if err != nil {
				return true, err
			}
		}
		if len(v) < slotHeader || !hasDigest(v, &p.digest) {
			return false, nil
		}
		var s scan
		if s.match(v, idx, vcas, p) {
			return true, nil
		}
		if v[DigestSize] != slotClaim || len(v) < claimSize {
			return false, nil
		}
		if before && !claimStale(v, p.now) {
			return true, nil
		}
		// A claim that gives way to this one (or a stale one): release it.
		if attempt >= t.attempts {
			return true, nil
		}
		v[DigestSize] = slotReleased
		err = t.store.Set(t.name(p.geo, idx), v[:slotHeader], vcas)
		if err == nil {
			return false, nil
		}
		if !errors.Is(err, ErrCasMismatch) {
			return true, err
		}
	}
}

// overflow decides the key in its overflow slot.
func (t *Table) overflow(p *Pending, h uint64) error {
	p.Overflow = true
	p.geo, p.idx = 0, overflowIndex(h)
	v, cas, err := t.store.Get(t.transientName(0, p.idx))
	switch {
	case isNotFound(err):
		p.cas = createCAS
		return t.run(p, nil)
	case err != nil:
		return err
	}
	p.cas = cas
	if len(v) < slotHeader || v[DigestSize] != slotLive {
		return t.run(p, nil)
	}
	return t.run(p, v[slotHeader:])
}

// overflowIndex picks the overflow slot of a keyed hash, from bits mixed apart from those that
// choose the buckets.
func overflowIndex(h uint64) uint32 {
	return uint32(((h ^ h>>29) * 0x9e3779b97f4a7c15) >> 58 % OverflowSlots)
}

// choices returns the two buckets of h in g and the starting slot in each, by the
// multiply-shift range reduction (Lemire, "A fast alternative to the modulo reduction"): the
// high half of x*n is uniform in [0, n), and the low half's high bits are fresh bits for the
// starting slot.
func (g geometry) choices(h uint64) (b [Choices]uint32, start [Choices]uint32) {
	for i := range Choices {
		x := uint64(uint32(h >> (32 * i)))
		m := x * uint64(g.buckets)
		b[i] = uint32(m >> 32)
		start[i] = uint32((uint64(uint32(m)) * BucketSlots) >> 32)
	}
	return b, start
}

// scan reads the key's slots in g: the starting slot of each bucket first, then the rest of
// both. It stops when it finds the key. With place, it also finds where a new key would go:
// the first free slot, from its starting slot, of the bucket holding fewer active keys.
//
// The count of created slots is read only when a never-written slot is the place. Below
// max_keys, the place is taken (a claim against a slot created meanwhile fails); at max_keys,
// a free written slot is taken instead (its claim checks for a copy made meanwhile, see
// create). Only when the key would go to overflow because the count says full are the slots
// read again, after the count: a key is never counted in overflow on slots read before it.
// Read the other way round, a worker could see the key's slot empty, another worker create
// the key there and count it, and the first read the count as full and send the key to an
// overflow slot: two copies of one key (the over-admission of
// TestNewKeyRaceEveryInterleaving, "max_keys 1").
func (t *Table) scan(g geometry, h uint64, p *Pending, place bool) (scan, error) {
	var s scan
	mode := scanFind
	if place {
		mode = scanPlace
	}
	err := t.scanWith(&s, g, h, p, mode, -1)
	return s, err
}

// How scanWith reads a key's slots.
const (
	scanFind   = iota // look for the key
	scanPlace         // look for the key, and for where a new key would go
	scanVerify        // look for copies of the key that win over p's claim (create's step 2)
)

// scanWith is scan with the count of created slots when it is known (created >= 0): read
// before every slot that this scan reads. It fills *s (from its zero value) rather than
// return a scan, and makes its second scan as a loop rather than a call: copying the struct
// out at each return, and the call, would make up a good part of the code a first request
// compiles.
//
// With scanVerify it is create's step 2 (the same slots in the same order, but p's own): a
// written slot is left to verifyCopy, and s.found set when a copy there wins over p's claim
// (the scan stops there; claims that p's wins over are released). One loop for both is less
// code for V8 to compile on the first request of a new key, which runs both.
func (t *Table) scanWith(s *scan, g geometry, h uint64, p *Pending, mode int, created int64) error {
	for {
		*s = scan{}
		b, start := g.choices(h)
		n := Choices
		if b[1] == b[0] {
			n = 1
		}
		counted := created < 0 // the count is not known yet: if needed, it is read after the slots
		var load [Choices]int
		var free, freeWritten [Choices]int // position+1 of the first free (written) slot, in read order
		var cas, casWritten [Choices]uint32
		before := true // with scanVerify: the slot comes before p's claim in the lookups' order
		for j := range BucketSlots {
			for c := range n {
				idx := b[c]*BucketSlots + (start[c]+uint32(j))%BucketSlots
				var v []byte
				var vcas uint32
				var err error
				if mode == scanVerify && idx == p.idx {
					before = false
					continue
				}
				if f := &t.first; f.ok && f.geo == g.maxKeys && f.idx == idx {
					// decide read this slot just before: the same read, not a second one.
					v, vcas, err = f.v, f.cas, f.err
					f.ok = false
				} else {
					v, vcas, err = t.store.Get(t.transientName(g.maxKeys, idx))
				}
				if isNotFound(err) {
					if free[c] == 0 {
						free[c], cas[c] = j+1, createCAS
					}
					continue
				}
				if err != nil {
					return err
				}
				k, err := t.classify(s, v, idx, vcas, p, mode, before)
				if err != nil {
					return err
				}
				switch k {
				case slotIsKey:
					return nil
				case slotIsFree:
					if free[c] == 0 {
						free[c], cas[c] = j+1, vcas
					}
					if freeWritten[c] == 0 {
						freeWritten[c], casWritten[c] = j+1, vcas
					}
					continue
				}
				load[c]++
			}
		}
		if mode != scanPlace {
			return nil
		}
		order := [Choices]int{0, 1}
		if n > 1 && load[1] < load[0] {
			order = [Choices]int{1, 0}
		}
		for _, c := range order[:n] {
			if free[c] == 0 {
				continue
			}
			at, placeCas, fresh := free[c], cas[c], false
			if placeCas == createCAS {
				// A never-written slot: only while fewer than max_keys slots exist.
				if created < 0 {
					created = int64(t.created(g.maxKeys))
				}
				switch {
				case created < int64(g.maxKeys):
					fresh = true
				case freeWritten[c] == 0:
					continue
				default:
					at, placeCas = freeWritten[c], casWritten[c]
				}
			}
			// The slot at position at-1 of bucket c's read order, computed again as the loop
			// did rather than remembered for every position.
			s.place, s.placeAt, s.placeCas, s.placeFresh = true, b[c]*BucketSlots+(start[c]+uint32(at-1))%BucketSlots, placeCas, fresh
			return nil
		}
		if counted && created >= int64(g.maxKeys) {
			// The key goes to overflow because the table is full: read the slots again, after
			// the count (a second round of the loop, with the count known).
			continue
		}
		return nil
	}
}

// What classify found in a written slot.
const (
	slotIsKey    = iota // the key, live or forwarded: recorded in the scan
	slotIsActive        // another key's active state, or a claim of the key (recorded)
	slotIsFree          // free for the key (see slotFree)
)

// classify tells what slot idx, written and read as v (cas), holds for scanWith, and records
// in s the key found there or a claim of the key. It is out of line, so that the first
// request of a fresh table, whose slots were never written, compiles none of it.
//
// With scanVerify (before: the slot comes before p's claim) it is verifyCopy's caller: a copy
// that wins over p's claim is reported as the key found (s.found), which ends the scan. One
// call for both keeps a call site out of scanWith's loop.
//
//go:noinline
func (t *Table) classify(s *scan, v []byte, idx, cas uint32, p *Pending, mode int, before bool) (int, error) {
	if mode == scanVerify {
		lost, err := t.verifyCopy(p, idx, before, v, cas)
		if lost || err != nil {
			s.found = lost
			return slotIsKey, err
		}
		return slotIsActive, nil
	}
	if s.match(v, idx, cas, p) {
		return slotIsKey, nil
	}
	if len(v) >= claimSize && v[DigestSize] == slotClaim && hasDigest(v, &p.digest) {
		// Another worker is creating the key here. Keep looking: a live copy, if there is
		// one, wins over the claim (see create). The claim is adopted whatever its age:
		// adopting it writes the slot by compare-and-swap against the claim, as taking it
		// for a free slot would, so a claim left by a VM that stopped blocks nobody either
		// way; but workers whose clocks are more than claimTTL apart would each take the
		// others' claims for free slots and write their own over them in turn, none
		// converting (TestClaimsAcrossClockSkewAreAdopted).
		if !s.pending {
			s.pending, s.claimAt, s.claimCas = true, idx, cas
		}
		return slotIsActive, nil
	}
	if t.slotFree(v, p.now) {
		return slotIsFree, nil
	}
	return slotIsActive, nil
}

// match records v, read from slot idx (cas), in s if it holds p's key: live, or a forward.
func (s *scan) match(v []byte, idx, cas uint32, p *Pending) bool {
	if len(v) < slotHeader || !hasDigest(v, &p.digest) {
		return false
	}
	switch {
	case v[DigestSize] == slotLive:
		s.found, s.idx, s.cas, s.state = true, idx, cas, v[slotHeader:]
		return true
	case v[DigestSize] == slotMoved && len(v) >= movedHeader:
		if m := binary.LittleEndian.Uint32(v[slotHeader:]); m != 0 {
			s.found, s.idx, s.cas, s.moved, s.state = true, idx, cas, m, v[movedHeader:]
			return true
		}
	}
	return false
}

// slotFree reports whether a slot held by another key can be given to a new one: its bytes are
// corrupt, its state (live, or the copy in a forward) is idle, or it holds a released or stale
// claim.
func (t *Table) slotFree(v []byte, now int64) bool {
	switch {
	case len(v) < slotHeader:
		return true
	case v[DigestSize] == slotLive:
		return t.limiter.Idle(v[slotHeader:], now)
	case v[DigestSize] == slotMoved && len(v) >= movedHeader:
		return t.limiter.Idle(v[movedHeader:], now)
	case v[DigestSize] == slotClaim && len(v) >= claimSize:
		return claimStale(v, now)
	}
	return true
}

// claimStale reports whether the claim v is older than claimTTL by the clock now (or that far
// in its future: a clock cannot be trusted across that much).
func claimStale(v []byte, now int64) bool {
	at := int64(binary.LittleEndian.Uint64(v[slotHeader:]))
	if at <= now {
		return uint64(now)-uint64(at) > uint64(claimTTL)
	}
	return uint64(at)-uint64(now) > uint64(claimTTL)
}

// run applies the limiter to state and prepares the value to write: digest, kind, state.
func (t *Table) run(p *Pending, state []byte) error {
	d, next := t.limiter.AllowN(state, p.now, p.n)
	p.Decision = d
	// The value is sized once and filled in place: one check of its capacity instead of an
	// append's growth check for the header and another for the state.
	size := slotHeader + len(next)
	if cap(p.value) < size {
		p.value = make([]byte, size, max(size, 64))
	}
	v := p.value[:size]
	copy(v, p.digest[:])
	v[DigestSize] = slotLive
	copy(v[slotHeader:], next)
	p.value = v
	return nil
}

// usedKey returns the name of the counter of slots created in geometry maxKeys.
func (t *Table) usedKey(maxKeys uint32) string {
	return t.prefix + strconv.FormatUint(uint64(maxKeys), 10) + ".used"
}

// created returns how many slots of geometry maxKeys exist, from the shared counter.
func (t *Table) created(maxKeys uint32) uint32 {
	v, _, err := t.store.Get(t.usedKey(maxKeys))
	if err != nil || len(v) != 4 {
		return 0
	}
	return binary.LittleEndian.Uint32(v)
}

// Used returns how many slots of the current geometry hold or have held a key, out of
// max_keys, from the counter every VM updates: the rule's table fill as all workers see it.
// Slots of idle keys are counted (they are reused, never deleted).
func (t *Table) Used() uint32 { return t.created(t.cur.maxKeys) }

// MaxKeys returns the number of keys the table holds.
func (t *Table) MaxKeys() uint32 { return t.cur.maxKeys }

// countCreated adds a created slot to geometry maxKeys' counter, with compare-and-swap, and
// returns the new count. The count feeds the fill gauge and the max_keys bound; after
// Attempts lost races it gives up (a count one short lets at most one more slot be created)
// and returns the last count it read.
func (t *Table) countCreated(maxKeys uint32) uint32 {
	var n uint32
	_, err := Update(t.store, t.usedKey(maxKeys), t.attempts, func(v []byte) []byte {
		n = 0
		if len(v) == 4 {
			n = binary.LittleEndian.Uint32(v)
		}
		binary.LittleEndian.PutUint32(t.count[:], n+1)
		return t.count[:]
	})
	if err != nil {
		return n
	}
	return n + 1
}

// transientName returns the name of slot idx of geometry geo (0: overflow slot idx) for a
// Get, which does not keep its key: the cached name when the slot's name is in the cache (an
// established key's slot, written on every request, is), otherwise the name built in the
// Table's scratch buffer, valid until the next call. Building it costs two number
// formattings, which a Wasm VM would pay on every request's read.
func (t *Table) transientName(geo, idx uint32) string { return t.slotName(geo, idx, false) }

// Warm allocates what the table's first decision needs (its slot name cache, about 6 KiB)
// now rather than then. The filter warms its rules' own tables while it configures, so that
// the Go heap's first growth happens before traffic, not in a fresh VM's first request, where
// the page allocator's slow path (code a V8 VM compiles on first use) is latency a client
// sees. Tables that may never see a request (a rarely used override's) are left cold: warming
// every one would cost their cache's memory in every VM whether used or not.
//
// It is not inlined: slotName calls it only for a table that was not warmed, which the
// filter's are, so their first request does not compile the allocation.
//
//go:noinline
func (t *Table) Warm() {
	if t.names == nil {
		t.names = new([nameCacheSize]nameEntry)
	}
}

// name returns the name of slot idx of geometry geo (0: overflow slot idx) as a string of its
// own, for a Set. Names are cached in a direct-mapped cache of nameCacheSize entries: the slot
// of an established key is written on every request, and building its name would cost an
// allocation each time. The cache does not grow with max_keys.
func (t *Table) name(geo, idx uint32) string { return t.slotName(geo, idx, true) }

// slotName is name (keep) and transientName (not keep) in one function, for V8 to compile
// once: both look the name up in the cache first, and build it in the scratch buffer when it
// is not there; name then keeps a copy in the cache (allocating the cache first if needed).
func (t *Table) slotName(geo, idx uint32, keep bool) string {
	if keep && t.names == nil {
		t.Warm()
	}
	if t.names != nil {
		if e := &t.names[nameSlot(geo, idx)]; e.name != "" && e.geo == geo && e.idx == idx {
			return e.name
		}
	}
	t.scratch = appendName(t.scratch[:0], t.prefix, geo, idx)
	if !keep {
		// The slice's pointer and length read as a string's: what unsafe.String makes, without
		// its checks of the pointer and length (code that runs for nothing: appendName's
		// result is never nil and its length never negative).
		return *(*string)(unsafe.Pointer(&t.scratch))
	}
	e := &t.names[nameSlot(geo, idx)]
	*e = nameEntry{geo: geo, idx: idx, name: string(t.scratch)}
	return e.name
}

// nameSlot returns the entry of the name cache that slot idx of geometry geo uses.
func nameSlot(geo, idx uint32) uint32 { return (idx ^ geo*0x9e3779b9) % nameCacheSize }

// appendName appends a slot name: prefix, then the geometry's max_keys, '.' and the slot
// number; or, for an overflow slot, prefix, "o." and its number.
func appendName(dst []byte, prefix string, geo, idx uint32) []byte {
	dst = append(dst, prefix...)
	if geo == 0 {
		dst = append(dst, 'o')
	} else {
		dst = strconv.AppendUint(dst, uint64(geo), 10)
	}
	dst = append(dst, '.')
	return strconv.AppendUint(dst, uint64(idx), 10)
}

// randomBytes fills b from math/rand/v2's global generator (see LoadSecret).
func randomBytes(b []byte) {
	for i := 0; i < len(b); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rand.Uint64())
		copy(b[i:], w[:])
	}
}
