package wasmhost

import "testing"

// SetFault fails the Gets and Sets it names with its status, leaves the others alone, and
// SetFault(nil) ends it; a failed Set writes nothing.
func TestSharedDataFault(t *testing.T) {
	s := NewSharedData()
	if st := s.Set("vm", "a", []byte("1"), 0); st != StatusOK {
		t.Fatal(st)
	}
	s.SetFault(func(key string, write bool) Status {
		if key == "a" && write {
			return StatusInternalFailure
		}
		if key == "b" && !write {
			return StatusBadArgument
		}
		return StatusOK
	})
	if st := s.Set("vm", "a", []byte("2"), 0); st != StatusInternalFailure {
		t.Fatalf("faulted Set: %v", st)
	}
	if v, _, st := s.Get("vm", "a"); st != StatusOK || string(v) != "1" {
		t.Fatalf("Get after a faulted Set: %q %v", v, st)
	}
	if _, _, st := s.Get("vm", "b"); st != StatusBadArgument {
		t.Fatalf("faulted Get: %v", st)
	}
	s.SetFault(nil)
	if _, _, st := s.Get("vm", "b"); st != StatusNotFound {
		t.Fatalf("Get after SetFault(nil): %v", st)
	}
}
