package sharedstate

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"unsafe"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// Limiter is what a Table needs from an algorithm: a decision over encoded state, and whether
// a state is back at full allowance (so its slot may go to another key, granting nobody anything).
type Limiter interface {
	AllowN(state []byte, now, n int64) (algorithms.Decision, []byte)
	Idle(state []byte, now int64) bool
}

// DigestSize is the length of the key digest stored in front of every slot's state (see
// keyDigest).
const DigestSize = 16

// GroupSlots is the number of slots a group holds at most, and Choices the number of groups
// (chosen by the keyed hash) a key may live in (see Table).
const (
	GroupSlots = 32
	Choices    = 2
)

// fingerprintSize is the length of a key's entry in its group's index: the first 8 bytes of
// its digest.
const fingerprintSize = 8

// firstGroupFree is how many free slots a key's first group must have for a new key to go
// there without looking at its second group (see findKey). With 10 the table fills as evenly
// as with a choice for every key (docs/key-table.md, "Filling up"; TestTableFalseDenialCurve).
const firstGroupFree = 10

// OverflowSlots is the number of overflow slots per rule. A key that finds no slot is counted
// in one of them, chosen by the keyed hash, so a flood that drains some overflow slots leaves
// the others to the new clients that hash there (see Table).
const OverflowSlots = 64

// maxGeometries is how many table geometries (distinct max_keys values) a rule remembers, the
// current one included.
const maxGeometries = 8

// slotLive is the kind of a slot value, the byte after the digest; slotHeader is the length of
// the value before the state. Only live slots are written; a value of another kind, or too
// short to hold a kind (a format the table does not read), is free for any key.
const (
	slotLive   = 0
	slotHeader = DigestSize + 1
)

// createCAS is the CAS number used to create an entry that did not exist. Envoy lets a Set of
// a missing key succeed whatever its cas, but cas 0 would also blindly overwrite an entry
// another worker created in the meantime. The largest cas can only still match an entry whose
// CAS number is exactly 2^32-1, once per 4 billion writes in the whole process.
const createCAS = math.MaxUint32

// idleSlack is how long after this configuration's tables last wrote a previous geometry VMs of
// a previous configuration may still write it: Envoy serves the connections opened before a
// configuration update with the filter of their time while they drain.
const idleSlack = int64(10 * 60 * 1e9)

// SecretKey is the shared-data key of the process-wide slot-addressing secret, a SipHash-2-4
// key of SecretSize bytes (see LoadSecret). Rule prefixes end in '|' and every slot name
// continues after it, so no slot of any rule can be named like this.
const (
	SecretKey  = "ratelimit|secret"
	SecretSize = 16
)

// ErrAttemptsExhausted means every compare-and-swap attempt lost a race: contention, on which
// the filter denies the request, so losing races never admits a request beyond the limit.
var ErrAttemptsExhausted = errors.New("sharedstate: compare-and-swap attempts exhausted")

// nameCacheSize is the number of slot names a Table keeps per VM (see Table.slotName).
const nameCacheSize = 256

// TableVMBytes bounds what one Table holds in a VM's memory whatever its max_keys: the name
// cache (names of at most 86 bytes), the name and probe buffers and the struct.
const TableVMBytes = nameCacheSize*(86+16+8) + 4*512 + 256

// SharedBytesPerKey is the worst-case number of shared-data bytes one stored key of a rule
// costs: its slot's name and value (digest, kind, state) plus envoyEntryOverhead, and its
// share of its group's index (its fingerprint, and the index entry's name and overhead shared
// by at least GroupSlots/2 keys). A configure-time budget multiplies it by max_keys +
// OverflowSlots + 3 per rule.
func SharedBytesPerKey(prefixLen, maxStateLen int) int {
	slot := prefixLen + 10 + 1 + 10 + slotHeader + maxStateLen + envoyEntryOverhead
	index := fingerprintSize + (prefixLen+10+1+10+envoyEntryOverhead+GroupSlots/2-1)/(GroupSlots/2)
	return slot + index
}

// envoyEntryOverhead is an estimate of what Envoy's shared data spends per entry beyond the
// key and value bytes: an unordered_map node with two std::string and a uint32 cas.
const envoyEntryOverhead = 128

// LoadSecret returns the process-wide secret that keys slot addressing, which every worker VM
// must agree on: a VM that finds none (or one of the wrong size) draws 16 random bytes and
// writes them with Update, so that of two VMs starting at once one wins and both use its secret.
//
// The bytes come from math/rand/v2's global generator: ChaCha8 keyed from the operating
// system's entropy (random_get on wasip1), unpredictable from its output, as a SipHash key
// needs. crypto/rand reads the same entropy but links Go's FIPS 140 module (0.28 MB of
// the .wasm); it would only differ if random_get failed, which Envoy's host CSPRNG does not.
func LoadSecret(store Store) (secret [SecretSize]byte, err error) {
	_, err = Update(store, SecretKey, 16, func(cur []byte) []byte {
		if len(cur) == SecretSize {
			secret = [SecretSize]byte(cur)
			return nil
		}
		binary.LittleEndian.PutUint64(secret[:], rand.Uint64())
		binary.LittleEndian.PutUint64(secret[8:], rand.Uint64())
		return secret[:]
	})
	if err != nil {
		return [SecretSize]byte{}, err
	}
	return secret, nil
}

// Table keeps the state of one rule's keys in at most max_keys shared-data slots;
// docs/key-table.md describes the design and what it costs, and this is its summary.
//
// A key is known by its digest (keyDigest: SipHash-2-4 under the process's secret, stored in
// front of its state); the digest picks two groups of at most GroupSlots slots and a home slot
// in the first. Each group's index entry lists the fingerprint of the key owning each slot,
// and is the authority on ownership. A lookup reads the home slot, then the first group's
// index, the second's unless the first has firstGroupFree free slots, and the slot the index
// names: at most four reads. A slot the index gives to the key that does not hold its digest
// yet is the key's, with a fresh state, written by compare-and-swap against what was read.
//
// A new key goes to its first group while that has firstGroupFree free slots, else to the
// group with more, at its home slot if free or idle, else at the group's first free slot after
// it: an index write by compare-and-swap, then the slot. Slots are never emptied, so free
// counts only fall, and of two workers placing the same key in different groups one sees the
// other's write or fails (TestNewKeyRaceRandomSchedules): a key has at most one index entry.
// When both groups are full, the key takes the slot of the one of two candidates whose
// eviction grants least (never a fully spent key), else is counted in one of OverflowSlots.
//
// Slot and index names carry the geometry (max_keys). A key not found in the current geometry
// is looked for in the previous ones that may still hold active state (until their last write
// plus the algorithm's full-refill time plus idleSlack), and decided where it is found active.
//
// A Table is not safe for concurrent use: each worker VM (single-threaded) has its own, and
// they share the slots through the Store.
type Table struct {
	store    Store
	prefix   string
	attempts int
	limiter  Limiter
	k0, k1   uint64

	cur  geometry
	prev []pastGeometry
	// curSlot and curIndex begin the names of the current geometry's slots and indexes (see
	// appendName), so that building a name formats one number, not two.
	curSlot, curIndex string
	// horizon is how long after its last write a previous geometry is still searched (see
	// Table); 0: always.
	horizon int64

	// names caches slot names (see slotName), allocated by Warm or on first use. An array
	// behind a pointer: an index below nameCacheSize needs no bounds check.
	names *[nameCacheSize]nameEntry
	// slot holds the last slot name built for a store call, and index the last two index
	// names (a lookup reads the indexes of two groups, then writes one), indexNext the next to
	// build: a request that reads and then writes the same slot or index builds its name once.
	slot      nameBuf
	index     [Choices]nameBuf
	indexNext uint8
	// probe holds a copy of a candidate's state while its eviction is weighed (see grantOf),
	// and of the state a lease take decides its batch on (see runLease).
	probe []byte
}

// geometry is one table layout: the max_keys it was sized for and the groups that follow.
type geometry struct{ maxKeys, groups uint32 }

// pastGeometry is a previous layout of the rule and when it was last written (0: unknown,
// searched always).
type pastGeometry struct {
	geometry
	written int64
}

func newGeometry(maxKeys uint32) geometry {
	return geometry{maxKeys: maxKeys, groups: max((maxKeys+GroupSlots-1)/GroupSlots, 1)}
}

// size returns the number of slots of group b: max_keys spread as evenly as possible.
func (g geometry) size(b uint32) uint32 {
	n := g.maxKeys / g.groups
	if b < g.maxKeys%g.groups {
		n++
	}
	return n
}

// choices returns the two groups of h in g and the key's home slot in the first, by the
// multiply-shift range reduction (Lemire, "A fast alternative to the modulo reduction"): the
// high half of x*n is uniform in [0, n), and the low half's high bits are fresh bits for the
// home slot.
func (g geometry) choices(h uint64) (b [Choices]uint32, home uint32) {
	for i := range Choices {
		m := uint64(uint32(h>>(32*i))) * uint64(g.groups)
		b[i] = uint32(m >> 32)
		if i == 0 {
			home = uint32((uint64(uint32(m)) * uint64(g.size(b[0]))) >> 32)
		}
	}
	return b, home
}

type nameEntry struct {
	geo, idx uint32
	name     string
}

// TableConfig configures a Table.
type TableConfig struct {
	Store    Store  // holds the slots, usually Host{}
	Prefix   string // namespaces the slots, e.g. "rl|api|"; unique per rule
	Slots    uint32 // max_keys: the number of distinct keys tracked (at least 1)
	Attempts int    // bounds the compare-and-swap loop (at least 1)
	Limiter  Limiter
	// Secret keys the slot addressing (see LoadSecret). Every VM of a process must use the
	// same one; the zero value works but is public, so clients could predict slots.
	Secret [SecretSize]byte
	// Now is the clock when the table is made (Unix nanoseconds): when max_keys changed, the
	// time the previous geometry stopped being current. 0 (unknown) keeps previous geometries
	// searched for as long as the rule records them.
	Now int64
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
	t := &Table{store: c.Store, prefix: c.Prefix, attempts: c.Attempts, limiter: c.Limiter,
		k0: binary.LittleEndian.Uint64(c.Secret[:8]), k1: binary.LittleEndian.Uint64(c.Secret[8:]),
		cur: newGeometry(c.Slots)}
	t.curSlot = string(strconv.AppendUint([]byte(c.Prefix), uint64(c.Slots), 10)) + "."
	t.curIndex = t.curSlot[:len(t.curSlot)-1] + "#"
	prev, err := t.registerGeometry(c.Now)
	if err != nil {
		return nil, err
	}
	t.prev = prev
	if len(prev) > 0 {
		t.horizon = idleHorizon(c.Limiter)
	}
	return t, nil
}

// AlsoWrittenBy tells the table that the limiters ls write its slots too, under parameters of
// their own (a rule's overrides decide the rule's keys in the rule's slots): a previous
// geometry is then searched for as long as the slowest of them keeps a state active, not only
// the table's own limiter.
func (t *Table) AlsoWrittenBy(ls ...Limiter) {
	if len(t.prev) == 0 || t.horizon == 0 {
		return
	}
	for _, l := range ls {
		h := idleHorizon(l)
		if h == 0 {
			t.horizon = 0 // one of them could not be measured: search always
			return
		}
		t.horizon = max(t.horizon, h)
	}
}

// geometriesKey is the name of the rule's record of geometries: per geometry, newest first, its
// max_keys (4 bytes LE) and when it was last written (8 bytes LE, 0 for the current one).
func (t *Table) geometriesKey() string { return t.prefix + "geometries" }

const geometryRecord = 12

// registerGeometry puts the current max_keys first in the rule's record of geometries, the one
// it displaces stamped with now, and returns the others, newest first.
func (t *Table) registerGeometry(now int64) ([]pastGeometry, error) {
	var others []pastGeometry
	_, err := Update(t.store, t.geometriesKey(), max(t.attempts, 8), func(v []byte) []byte {
		others = others[:0]
		for i := 0; i+geometryRecord <= len(v); i += geometryRecord {
			m := binary.LittleEndian.Uint32(v[i:])
			at := int64(binary.LittleEndian.Uint64(v[i+4:]))
			if i == 0 && m != t.cur.maxKeys {
				at = now // the current geometry until now
			}
			if m != 0 && m != t.cur.maxKeys && len(others) < maxGeometries-1 {
				others = append(others, pastGeometry{newGeometry(m), at})
			}
		}
		if len(v) >= geometryRecord && binary.LittleEndian.Uint32(v) == t.cur.maxKeys {
			return nil // already the current geometry: nothing to write
		}
		next := binary.LittleEndian.AppendUint32(nil, t.cur.maxKeys)
		next = binary.LittleEndian.AppendUint64(next, 0)
		for _, o := range others {
			next = binary.LittleEndian.AppendUint32(next, o.maxKeys)
			next = binary.LittleEndian.AppendUint64(next, uint64(o.written))
		}
		return next
	})
	if err != nil {
		return nil, err
	}
	return others, nil
}

// touchGeometry records that previous geometry i was written at now, when the record's time is
// more than a quarter of the horizon old: a key kept active there stays found (see Table).
// Losing the record's races only leaves the time as another worker wrote it.
func (t *Table) touchGeometry(i int, now int64) {
	pg := &t.prev[i]
	if t.horizon == 0 || pg.written == 0 || now-pg.written < t.horizon/4 {
		return
	}
	_, _ = Update(t.store, t.geometriesKey(), t.attempts, func(v []byte) []byte {
		for j := geometryRecord; j+geometryRecord <= len(v); j += geometryRecord {
			if binary.LittleEndian.Uint32(v[j:]) == pg.maxKeys {
				if at := int64(binary.LittleEndian.Uint64(v[j+4:])); at == 0 || at >= now {
					return nil
				}
				next := append([]byte(nil), v...)
				binary.LittleEndian.PutUint64(next[j+4:], uint64(now))
				return next
			}
		}
		return nil
	})
	pg.written = now
}

// searched reports whether previous geometry pg may still hold active state at now.
func (t *Table) searched(pg *pastGeometry, now int64) bool {
	return t.horizon == 0 || pg.written == 0 || now <= pg.written+t.horizon+t.horizon/4+idleSlack
}

// idleHorizon returns how long the limiter takes to bring a key that spent its whole allowance
// at once back to full allowance, doubled: no state it writes stays active longer after its
// last write. 0 means it could not be measured (previous geometries are then always searched).
func idleHorizon(lim Limiter) int64 {
	d, _ := lim.AllowN(nil, 0, 1)
	if d.Limit <= 0 {
		return 0
	}
	_, state := lim.AllowN(nil, 0, d.Limit)
	for at := int64(1e6); at > 0 && at < 1<<62; at *= 2 {
		if lim.Idle(state, at) {
			return 2 * at
		}
	}
	return 0
}

// Pending is a decision made but not yet written, so that a request denied by a later rule
// consumes nothing of an earlier one. It is reused across requests.
type Pending struct {
	// Decision is the outcome; it may change when Commit has to decide again after a race.
	Decision algorithms.Decision
	Retries  int  // compare-and-swap attempts lost so far
	Overflow bool // the key found no slot of its own and is counted in an overflow slot
	// Claimed reports that Commit placed the key in a slot never used before: the rule's
	// table holds one more key.
	Claimed bool
	// Evicted reports that Commit placed the key in the slot of another key, which lost its
	// state; Granted is what that key may spend again because of it (0 for an idle key).
	Evicted bool
	Granted int64

	digest [DigestSize]byte
	now, n int64
	h      uint64 // the key's keyed hash
	// The slot to write: geo is its geometry's max_keys (0 for an overflow slot), idx its
	// number, cas what it was read with.
	geo, idx uint32
	cas      uint32
	value    []byte
	// place is set when the key's entry must be written in the index of group ixGroup
	// first: ixValue, against ixCas. fresh: the slot was never used; evict: it held
	// another key, whose eviction grants it grant.
	place, fresh, evict bool
	ixGroup, ixCas      uint32
	ixValue             []byte
	grant               int64
	// past is 1 + the previous geometry the key was decided in (0: the current one).
	past int

	// Reserved is what a Take reserved beyond the request's cost (see lease.go).
	Reserved int64
	// op is the operation run makes (opAllow: AllowN; see lease.go for the others), and arg
	// its argument: a Take's most reserve, a GiveBack's instant of the take, a Settle's
	// instant of the reservation.
	op  uint8
	arg int64
}

// Decide reads the key's state and decides whether n events may pass at now. It writes nothing.
func (t *Table) Decide(key []byte, now, n int64, p *Pending) error {
	return t.begin(p, key, opAllow, now, n, 0)
}

// begin sets p up for operation op (with its n and arg) on key at now, and decides it.
func (t *Table) begin(p *Pending, key []byte, op uint8, now, n, arg int64) error {
	p.now, p.n, p.Retries, p.Claimed, p.Evicted, p.Granted = now, n, 0, false, false, 0
	p.op, p.arg, p.Reserved = op, arg, 0
	// The digest and hash are made once per operation: a retry in Commit decides again on them.
	p.digest, p.h = keyDigest(t.k0, t.k1, key)
	return t.decide(p)
}

// Commit writes an allowed decision with compare-and-swap: the key's index entry first when it
// is placed, then its slot. When another worker wrote either since Decide read it, the key is
// decided again on what is there now (perhaps a denial) and written again, at most Attempts
// times in all; ErrAttemptsExhausted means every attempt lost. A denial is never written.
func (t *Table) Commit(p *Pending) error {
	if !p.Decision.Allowed {
		return nil
	}
	// The index entry when the key is placed, then the slot, through one store call: each
	// call site is code of its own for V8 to compile on a VM's first request.
	for placing := p.place; ; placing = false {
		name, v, cas := "", p.value, p.cas
		if placing {
			name, v, cas = t.indexName(p.geo, p.ixGroup), p.ixValue, p.ixCas
		} else {
			// A client seen once costs no allocation and takes no cache entry (see slotName).
			name = t.slotName(p.geo, p.idx, !p.Claimed && !p.Evicted)
		}
		if err := t.store.Set(name, v, cas); err != nil {
			return t.recommit(p, err)
		}
		if !placing {
			break
		}
		// The entry is the key's now, whatever becomes of the slot's write: a retry finds it.
		p.place = false
		p.Claimed, p.Evicted, p.Granted = p.fresh, p.evict, p.grant
	}
	if p.past != 0 {
		t.touchGeometry(p.past-1, p.now)
	}
	return nil
}

// recommit is Commit after a write that failed with err: after a lost race it decides again
// and commits (at most Attempts times in all). Out of line (see filter/doc.go).
func (t *Table) recommit(p *Pending, err error) error {
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
	return t.Commit(p)
}

// decide finds the key's slot (see Table) and runs the limiter on its state: a key found live
// in its home slot, the common case, on that read alone, otherwise through lookup.
func (t *Table) decide(p *Pending) error {
	p.Overflow, p.place, p.past = false, false, 0
	g := t.cur
	b, home := g.choices(p.h)
	idx := b[0]*GroupSlots + home
	v, cas, err := t.getSlot(g.maxKeys, idx)
	if err != nil {
		return err
	}
	if isKey(v, &p.digest) {
		p.geo, p.idx, p.cas = g.maxKeys, idx, cas
		return t.run(p, v[slotHeader:])
	}
	return t.lookup(p, g, b, home, homeRead{v: v, cas: cas})
}

// getSlot reads slot idx of geometry geo (0: overflow slot idx). A slot never written reads as
// nil with createCAS, the CAS number to create it with.
func (t *Table) getSlot(geo, idx uint32) ([]byte, uint32, error) {
	v, cas, err := t.store.Get(t.slotName(geo, idx, false))
	if err != nil && isNotFound(err) {
		return nil, createCAS, nil
	}
	return v, cas, err
}

// isKey reports whether slot value v holds the live state of the key of digest d.
func isKey(v []byte, d *[DigestSize]byte) bool {
	return len(v) >= slotHeader && v[DigestSize] == slotLive && hasDigest(v, d)
}

// hasDigest reports whether v, at least DigestSize bytes long, starts with d, as two 8-byte
// words: Go's wasm backend compiles a [DigestSize]byte comparison as a stack copy and a call
// of memequal, more code for V8 to compile in decide and more time.
func hasDigest(v []byte, d *[DigestSize]byte) bool {
	v = v[:DigestSize]
	return binary.LittleEndian.Uint64(v) == binary.LittleEndian.Uint64(d[:8]) &&
		binary.LittleEndian.Uint64(v[8:]) == binary.LittleEndian.Uint64(d[8:])
}

// fingerprint returns the key's entry in a group index: the first 8 bytes of its digest, never
// 0 (which marks a slot never used).
func fingerprint(d *[DigestSize]byte) uint64 {
	return max(binary.LittleEndian.Uint64(d[:8]), 1)
}

// homeRead is decide's read of the key's home slot (see getSlot).
type homeRead struct {
	v   []byte
	cas uint32
}

// group is one group's index as a lookup read it.
type group struct {
	b    uint32
	ix   []byte // the index; nil when it was never written (or is corrupt: every slot free)
	cas  uint32
	size uint32
	used uint32 // slots whose entry is set
	at   int32  // the first slot whose entry is the fingerprint looked for, or -1
	free int32  // the first free slot from the key's home on (wrapping around), or -1
}

// readGroup reads the index of group b of g and, in one pass over it, looks for fingerprint
// fp, counts the used slots and finds the first free slot from slot home on.
func (t *Table) readGroup(g geometry, b uint32, fp uint64, home uint32) (group, error) {
	gr := group{b: b, size: g.size(b), cas: createCAS, at: -1}
	gr.free = int32(home % gr.size)
	v, cas, err := t.store.Get(t.indexName(g.maxKeys, b))
	if isNotFound(err) {
		return gr, nil
	}
	if err != nil {
		return gr, err
	}
	gr.cas = cas
	if len(v) != int(gr.size)*fingerprintSize {
		return gr, nil
	}
	gr.ix = v
	from, first, free := gr.free, int32(-1), uint32(0)
	gr.free = -1
	// The slice advances by one entry per step: the loads need no bounds check of their own.
	for i := int32(0); len(v) >= fingerprintSize; i++ {
		e := binary.LittleEndian.Uint64(v)
		v = v[fingerprintSize:]
		if e == 0 {
			free++
			if first < 0 {
				first = i
			}
			if gr.free < 0 && i >= from {
				gr.free = i
			}
		} else if e == fp && gr.at < 0 {
			gr.at = i
		}
	}
	if gr.free < 0 {
		gr.free = first
	}
	gr.used = gr.size - free
	return gr, nil
}

// entry returns the fingerprint of slot i's owner (0: never used).
func (gr *group) entry(i uint32) uint64 {
	if gr.ix == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(gr.ix[i*fingerprintSize:])
}

// lookup decides a key that decide did not find live in its home slot: through the indexes
// of its groups in the current geometry, then in the previous geometries, and otherwise as a
// new key placed in the current geometry (or counted in overflow).
func (t *Table) lookup(p *Pending, g geometry, b [Choices]uint32, home uint32, hr homeRead) error {
	fp := fingerprint(&p.digest)
	gs, n, c, err := t.findKey(g, b, fp, home)
	if err != nil {
		return err
	}
	if c >= 0 {
		return t.decideIndexed(p, g.maxKeys, b[c], uint32(gs[c].at), c == 0 && uint32(gs[c].at) == home, &hr)
	}
	if len(t.prev) > 0 {
		if found, err := t.decidePast(p); found || err != nil {
			return err
		}
	}
	// A new key: its first group while that has firstGroupFree free slots, else the group with
	// more (see Table).
	target := &gs[0]
	if n > 1 && gs[1].size-gs[1].used > gs[0].size-gs[0].used {
		target = &gs[1]
	}
	p.geo, p.place, p.ixGroup, p.ixCas = g.maxKeys, true, target.b, target.cas
	p.fresh, p.evict, p.grant = false, false, 0
	var at uint32
	switch first := target == &gs[0]; {
	case first && target.entry(home) == 0:
		at, p.fresh = home, true
		p.idx, p.cas = target.b*GroupSlots+home, hr.cas
	case (!first || hr.v == nil) && target.free >= 0:
		// A free slot, and no key at home that could be evicted instead.
		at, p.fresh = uint32(target.free), true
		// A slot never used was never written by this table; createCAS fails if an earlier
		// version of the table left a value there, and the retry writes against its CAS.
		p.idx, p.cas = target.b*GroupSlots+at, createCAS
	default:
		var ok bool
		if at, ok, err = t.placeCrowded(p, g, target, first, home, &hr); !ok || err != nil {
			return err
		}
	}
	size := int(target.size) * fingerprintSize
	if target.ix == nil {
		target.ix = make([]byte, size)
	}
	binary.LittleEndian.PutUint64(target.ix[at*fingerprintSize:], fp)
	p.ixValue = target.ix
	return t.run(p, nil)
}

// decideIndexed decides the key that group b's index of geometry geo places in its slot i; at
// home, that slot is the key's home slot, read as hr. Out of lookup's line: a new key, a VM's
// first, has no entry.
func (t *Table) decideIndexed(p *Pending, geo, b, i uint32, atHome bool, hr *homeRead) error {
	idx := b*GroupSlots + i
	if atHome {
		return t.decideOwn(p, geo, idx, hr.v, hr.cas)
	}
	v, cas, err := t.getSlot(geo, idx)
	if err != nil {
		return err
	}
	return t.decideOwn(p, geo, idx, v, cas)
}

// placeCrowded is lookup's placement of a new key in group target (the key's first group when
// first) when its home slot holds another key's value: that key's slot if it is idle, else a
// free slot, else chooseVictim's. With no slot to take, it decides the key in its overflow
// slot and reports !ok. Out of lookup's line: a fresh table places its keys in free slots.
func (t *Table) placeCrowded(p *Pending, g geometry, target *group, first bool, home uint32, hr *homeRead) (at uint32, ok bool, err error) {
	switch {
	case first && ownerHolds(hr.v, target.entry(home)) && t.limiter.Idle(hr.v[slotHeader:], p.now):
		at, ok, p.evict = home, true, true
		p.idx, p.cas = target.b*GroupSlots+home, hr.cas
	case target.free >= 0:
		at, ok, p.fresh = uint32(target.free), true, true
		p.idx, p.cas = target.b*GroupSlots+at, createCAS
	default:
		if at, ok, err = t.chooseVictim(p, g, target, home, *hr); err == nil && !ok {
			p.place = false
			err = t.overflow(p, p.h)
		}
	}
	return at, ok, err
}

// ownerHolds reports whether slot value v holds the live state of the key whose index entry is
// e (and not a value left by a key before it, whose placement is still being written).
func ownerHolds(v []byte, e uint64) bool {
	return len(v) >= slotHeader && v[DigestSize] == slotLive && max(binary.LittleEndian.Uint64(v), 1) == e
}

// decideOwn decides the key in slot idx of geometry geo, which its index gives it, read as v
// and cas (see getSlot). A slot that does not hold the key's digest yet is being placed by
// another worker (see Table): the key starts there afresh.
func (t *Table) decideOwn(p *Pending, geo, idx uint32, v []byte, cas uint32) error {
	p.geo, p.idx, p.cas = geo, idx, cas
	if isKey(v, &p.digest) {
		return t.run(p, v[slotHeader:])
	}
	return t.run(p, nil)
}

// decidePast looks the key up in the previous geometries that may still hold active state,
// newest first, and decides it where it is found active; it reports whether it did. Out of
// line, like chooseVictim and overflow (see filter/doc.go): a table that never changed
// max_keys, and a new key of a table that is not full, do not compile them.
func (t *Table) decidePast(p *Pending) (bool, error) {
	fp := fingerprint(&p.digest)
	for i := range t.prev {
		pg := &t.prev[i]
		if !t.searched(pg, p.now) {
			continue
		}
		b, _ := pg.choices(p.h)
		gs, _, c, err := t.findKey(pg.geometry, b, fp, 0)
		if err != nil {
			return false, err
		}
		if c < 0 {
			continue
		}
		idx := b[c]*GroupSlots + uint32(gs[c].at)
		v, cas, err := t.getSlot(pg.maxKeys, idx)
		if err != nil {
			return false, err
		}
		if isKey(v, &p.digest) && !t.limiter.Idle(v[slotHeader:], p.now) {
			p.geo, p.idx, p.cas, p.past = pg.maxKeys, idx, cas, i+1
			return true, t.run(p, v[slotHeader:])
		}
	}
	return false, nil
}

// findKey reads the indexes of groups b of g in turn until one lists fingerprint fp (home is
// the key's home slot, see readGroup). It returns the groups read, how many (the second is not
// read when the first has firstGroupFree free slots: it has had them ever since the key could
// have been placed, so the key is not in the second) and the one listing fp, or -1.
func (t *Table) findKey(g geometry, b [Choices]uint32, fp uint64, home uint32) (gs [Choices]group, n, found int, err error) {
	n = Choices
	if b[1] == b[0] {
		n = 1
	}
	for c := range n {
		if gs[c], err = t.readGroup(g, b[c], fp, home); err != nil || gs[c].at >= 0 {
			return gs, c + 1, c, err
		}
		if gs[0].size-gs[0].used >= firstGroupFree {
			return gs, 1, -1, nil
		}
	}
	return gs, n, -1, nil
}

// chooseVictim picks, in the full group gr, the slot whose key's eviction grants least among
// two candidates: the home slot (when gr is the key's first group; hr is its read) and one
// more, chosen by the key's hash and the clock so that a key's later attempts weigh other
// slots. A candidate whose key has spent its whole allowance, or whose slot does not hold its
// owner's state yet, is not taken. It fills p's slot and reports whether there was one.
func (t *Table) chooseVictim(p *Pending, g geometry, gr *group, home uint32, hr homeRead) (at uint32, ok bool, err error) {
	best := int64(-1)
	consider := func(i uint32, v []byte, cas uint32) {
		if !ownerHolds(v, gr.entry(i)) {
			return
		}
		grant, evictable := t.grantOf(v[slotHeader:], p.now)
		if evictable && (best < 0 || grant < best) {
			best, at, ok = grant, i, true
			p.idx, p.cas = gr.b*GroupSlots+i, cas
		}
	}
	bs, _ := g.choices(p.h)
	first := gr.b == bs[0]
	other := uint32(((p.h >> 17) ^ uint64(p.now)>>20) % uint64(gr.size))
	if first {
		consider(home, hr.v, hr.cas)
		if other == home {
			other = (other + 1) % gr.size
		}
	}
	if (!ok || best > 0) && (!first || other != home) {
		v, cas, err := t.getSlot(g.maxKeys, gr.b*GroupSlots+other)
		if err != nil {
			return 0, false, err
		}
		consider(other, v, cas)
	}
	p.evict, p.grant = ok, max(best, 0)
	return at, ok, nil
}

// grantOf returns what forgetting a key's state would give it back at now, and whether it may
// be forgotten: an idle state gives nothing; an active one gives back what it has spent; a
// state that would deny one more event has spent everything and is kept.
func (t *Table) grantOf(state []byte, now int64) (int64, bool) {
	if t.limiter.Idle(state, now) {
		return 0, true
	}
	// AllowN may write into the state it is given: it decides on a copy.
	t.probe = append(t.probe[:0], state...)
	d, _ := t.limiter.AllowN(t.probe, now, 1)
	if !d.Allowed {
		return 0, false
	}
	return max(d.Limit-d.Remaining-1, 0), true
}

// overflow decides the key in its overflow slot.
func (t *Table) overflow(p *Pending, h uint64) error {
	p.Overflow = true
	p.geo, p.idx = 0, overflowIndex(h)
	v, cas, err := t.getSlot(0, p.idx)
	if err != nil {
		return err
	}
	p.cas = cas
	if len(v) < slotHeader || v[DigestSize] != slotLive {
		return t.run(p, nil)
	}
	return t.run(p, v[slotHeader:])
}

// overflowIndex picks the overflow slot of a keyed hash, from bits mixed apart from those that
// choose the groups.
func overflowIndex(h uint64) uint32 {
	return uint32(((h ^ h>>29) * 0x9e3779b97f4a7c15) >> 58 % OverflowSlots)
}

// run applies the limiter to state and prepares the value to write: digest, kind, state.
func (t *Table) run(p *Pending, state []byte) error {
	if state == nil && cap(p.value) > slotHeader {
		// A fresh key: the limiter encodes its first state (an empty state is a fresh key)
		// in place, where the value will hold it, rather than in a buffer of its own.
		state = p.value[slotHeader:slotHeader]
	}
	var next []byte
	if p.op == opAllow {
		p.Decision, next = t.limiter.AllowN(state, p.now, p.n)
	} else {
		p.Decision, next = t.runLease(p, state)
	}
	// The value is sized once and filled in place: one capacity check, not one per append.
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

// nameBuf is a name built for a store call and the entry it names: slot or group idx of
// geometry geo.
type nameBuf struct {
	b        []byte
	geo, idx uint32
	built    bool
}

// holds reports whether the buffer holds the name of entry idx of geometry geo.
func (n *nameBuf) holds(geo, idx uint32) bool { return n.built && n.geo == geo && n.idx == idx }

// build builds the name of entry idx of geometry geo of t, a slot's (sep '.') or a group
// index's (sep '#'): cur, the current geometry's names' common start ("" when not made), and
// idx, or else appendName's. One builder for both kinds of name: each is code of its own for
// V8 to compile on a VM's first request.
func (n *nameBuf) build(t *Table, cur string, geo uint32, sep byte, idx uint32) {
	if geo == t.cur.maxKeys && cur != "" {
		n.b = strconv.AppendUint(append(n.b[:0], cur...), uint64(idx), 10)
	} else {
		n.b = appendName(n.b[:0], t.prefix, geo, sep, idx)
	}
	n.geo, n.idx, n.built = geo, idx, true
}

// string returns the name, sharing the buffer's bytes: valid until the next name is built.
// The slice header read as a string's is what unsafe.String makes, without its checks, which
// a built name, never empty, does not need.
func (n *nameBuf) string() string { return *(*string)(unsafe.Pointer(&n.b)) }

// indexName returns the name of group b's index in geometry geo for a store call (valid until
// two more index names are built): prefix, max_keys, '#' and the group number.
func (t *Table) indexName(geo, b uint32) string {
	for i := range t.index {
		if t.index[i].holds(geo, b) {
			return t.index[i].string()
		}
	}
	n := &t.index[t.indexNext%Choices]
	t.indexNext++
	n.build(t, t.curIndex, geo, '#', b)
	return n.string()
}

// Warm allocates the table's slot name cache (about 6 KiB) now rather than on its first
// decision: the filter warms its rules' own tables while it configures, so that the Go heap
// grows before traffic, not in a fresh VM's first request (the page allocator's slow path is
// code V8 compiles on first use).
func (t *Table) Warm() {
	if t.names == nil {
		t.names = new([nameCacheSize]nameEntry)
	}
}

// slotName returns the name of slot idx of geometry geo (0: overflow slot idx) for a store
// call, which keeps no key: the cached name if there is one, else the name in the Table's slot
// name buffer, valid until the next slot name is built. With keep it also puts it in the
// Table's direct-mapped name cache, which does not grow with max_keys: an established key's
// slot is read and written on every request, and formatting a number costs about as much as
// the rest of the lookup. Commit keeps the names of keys that were in their slot already, not
// of keys it places (most never come back).
func (t *Table) slotName(geo, idx uint32, keep bool) string {
	if keep && t.names == nil {
		t.Warm()
	}
	if t.names != nil {
		if e := &t.names[nameSlot(geo, idx)]; e.name != "" && e.geo == geo && e.idx == idx {
			return e.name
		}
	}
	n := &t.slot
	if !n.holds(geo, idx) {
		n.build(t, t.curSlot, geo, '.', idx)
	}
	if !keep {
		return n.string()
	}
	e := &t.names[nameSlot(geo, idx)]
	*e = nameEntry{geo: geo, idx: idx, name: string(n.b)}
	return e.name
}

// nameSlot returns the entry of the name cache that slot idx of geometry geo uses.
func nameSlot(geo, idx uint32) uint32 { return (idx ^ geo*0x9e3779b9) % nameCacheSize }

// appendName appends the name of entry idx of geometry geo: prefix, the geometry's max_keys
// ('o' for the overflow slots, geo 0), sep ('.' for a slot, '#' for a group's index) and idx.
func appendName(dst []byte, prefix string, geo uint32, sep byte, idx uint32) []byte {
	dst = append(dst, prefix...)
	if geo == 0 {
		dst = append(dst, 'o')
	} else {
		dst = strconv.AppendUint(dst, uint64(geo), 10)
	}
	return strconv.AppendUint(append(dst, sep), uint64(idx), 10)
}
