package sharedstate

import "errors"

// Update is the one read-modify-write of a single shared-data entry with bounded
// compare-and-swap: it reads key, computes the value to store with next(cur) (cur is nil when
// the key has never been written), and writes it back under the CAS number it read (createCAS
// for a new key). When another writer got there first (ErrCasMismatch) it reads again, up to
// attempts times in all.
//
// next may be called once per attempt and must not keep cur. When it returns nil the entry
// already holds what it should and nothing is written. Update returns the number of races
// lost (for a retry metric), and ErrAttemptsExhausted when every attempt lost, or the first
// error of the store other than a lost race.
func Update(store Store, key string, attempts int, next func(cur []byte) []byte) (lost int, err error) {
	for range attempts {
		cur, cas, err := store.Get(key)
		if isNotFound(err) {
			cur, cas = nil, createCAS
		} else if err != nil {
			return lost, err
		}
		val := next(cur)
		if val == nil {
			return lost, nil
		}
		err = store.Set(key, val, cas)
		if err == nil {
			return lost, nil
		}
		if !errors.Is(err, ErrCasMismatch) {
			return lost, err
		}
		lost++
	}
	return lost, ErrAttemptsExhausted
}
