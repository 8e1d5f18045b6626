package wasmhost

import (
	"sort"
	"sync"
)

// SharedData is a proxy-wasm shared-data store with Envoy's semantics: one
// mutex for everything, keys namespaced by vm_id, no expiry, no deletion, and
// compare-and-swap numbers taken from one counter that starts at 1.
//
// By default every Host in the process uses the same store (ProcessSharedData),
// exactly like the worker VMs of one Envoy process. Give Options.SharedData a
// store of its own to model a second, independent proxy in the same test.
type SharedData struct {
	mu      sync.Mutex
	nextCas uint32
	ns      map[string]map[string]*sharedEntry

	// fault, when set, fails reads and writes on purpose (see SetFault).
	fault func(key string, write bool) Status

	// Shared queues live in the same process-wide object in Envoy.
	nextQueue   uint32
	queues      map[uint32]*sharedQueue
	queueByName map[string]uint32
}

type sharedQueue struct {
	items  [][]byte
	notify func(token uint32) // wakes the VM that registered the queue
}

type sharedEntry struct {
	value []byte
	cas   uint32
}

// NewSharedData returns an empty store, independent of the process-wide one.
func NewSharedData() *SharedData {
	return &SharedData{
		ns:          make(map[string]map[string]*sharedEntry),
		queues:      make(map[uint32]*sharedQueue),
		queueByName: make(map[string]uint32),
	}
}

var processSharedData = NewSharedData()

// ProcessSharedData returns the process-wide store that Hosts use when
// Options.SharedData is nil.
func ProcessSharedData() *SharedData { return processSharedData }

// casLocked returns the next cas number. Envoy's counter is a uint32 that
// skips 0 on wrap-around, so 0 never identifies a stored value.
func (s *SharedData) casLocked() uint32 {
	s.nextCas++
	if s.nextCas == 0 {
		s.nextCas = 1
	}
	return s.nextCas
}

// SetFault makes every Get and Set for which fault returns a status other than
// StatusOK fail with that status, until SetFault(nil). Envoy's shared data never
// fails this way (a Get finds the key or not, a Set may lose its compare-and-swap);
// the hook exists so that tests can show what a guest does if it ever did, such as
// its failure_mode. It applies to the guests' calls and to Host.GetSharedData and
// Host.SetSharedData alike.
func (s *SharedData) SetFault(fault func(key string, write bool) Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = fault
}

// Get returns a copy of the value stored under key in the vm_id namespace and
// its cas number. A missing key is StatusNotFound.
func (s *SharedData) Get(vmID, key string) (value []byte, cas uint32, st Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fault != nil {
		if st := s.fault(key, false); st != StatusOK {
			return nil, 0, st
		}
	}
	e, ok := s.ns[vmID][key]
	if !ok {
		return nil, 0, StatusNotFound
	}
	return append([]byte(nil), e.value...), e.cas, StatusOK
}

// Set stores value under key with Envoy's rules: cas 0 writes unconditionally;
// an absent key is written whatever cas is; otherwise cas must equal the
// stored cas number or the result is StatusCasMismatch. Every successful write
// takes a new cas number.
func (s *SharedData) Set(vmID, key string, value []byte, cas uint32) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fault != nil {
		if st := s.fault(key, true); st != StatusOK {
			return st
		}
	}
	m := s.ns[vmID]
	if m == nil {
		m = make(map[string]*sharedEntry)
		s.ns[vmID] = m
	}
	e, ok := m[key]
	if ok && cas != 0 && cas != e.cas {
		return StatusCasMismatch
	}
	if !ok {
		e = &sharedEntry{}
		m[key] = e
	}
	e.value = append(e.value[:0:0], value...)
	e.cas = s.casLocked()
	return StatusOK
}

// Keys lists the keys of a vm_id namespace in sorted order (for tests and
// debugging; Envoy has no such call).
func (s *SharedData) Keys(vmID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.ns[vmID]))
	for k := range s.ns[vmID] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Reset empties one vm_id namespace. Envoy cannot delete shared data; tests
// that share the process-wide store use this (or unique vm_ids) to start clean.
func (s *SharedData) Reset(vmID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ns, vmID)
}

// registerQueue creates (or re-binds) the queue vmID/name; proxy_on_queue_ready
// goes to the VM that registered it last, as in Envoy.
func (s *SharedData) registerQueue(vmID, name string, notify func(uint32)) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := vmID + "\x00" + name
	if t, ok := s.queueByName[key]; ok {
		s.queues[t].notify = notify
		return t
	}
	s.nextQueue++
	t := s.nextQueue
	s.queueByName[key] = t
	s.queues[t] = &sharedQueue{notify: notify}
	return t
}

func (s *SharedData) resolveQueue(vmID, name string) (uint32, Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.queueByName[vmID+"\x00"+name]
	if !ok {
		return 0, StatusNotFound
	}
	return t, StatusOK
}

func (s *SharedData) enqueue(token uint32, data []byte) Status {
	s.mu.Lock()
	q, ok := s.queues[token]
	if !ok {
		s.mu.Unlock()
		return StatusNotFound
	}
	q.items = append(q.items, append([]byte(nil), data...))
	notify := q.notify
	s.mu.Unlock()
	if notify != nil {
		notify(token)
	}
	return StatusOK
}

func (s *SharedData) dequeue(token uint32) ([]byte, Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[token]
	if !ok {
		return nil, StatusNotFound
	}
	if len(q.items) == 0 {
		return nil, StatusEmpty
	}
	d := q.items[0]
	q.items = q.items[1:]
	return d, StatusOK
}
