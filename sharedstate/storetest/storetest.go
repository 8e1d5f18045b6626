// Package storetest is the conformance suite every sharedstate.Store must pass: the in-memory
// store, the proxy-wasm host store under the SDK's emulator, and the wazero host's shared data.
// A store that passes it can hold rate-limit state without losing updates.
package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/sharedstate"
)

// Options describes what a store under test can do.
type Options struct {
	// ZeroCasIsConditional is set for the SDK's proxytest emulator, which compares cas 0 like
	// any other number where Envoy writes unconditionally; the unconditional-write check is
	// then skipped.
	ZeroCasIsConditional bool
	// Concurrent is set for stores that are safe for concurrent use; the lost-update check
	// then runs from several goroutines.
	Concurrent bool
}

// Run runs the suite against stores made by newStore (a fresh, empty store per call).
func Run(t *testing.T, newStore func(t *testing.T) sharedstate.Store, opts Options) {
	t.Run("missing key is NotFound", func(t *testing.T) {
		s := newStore(t)
		_, _, err := s.Get("missing")
		if !errors.Is(err, sharedstate.ErrNotFound) {
			t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
		}
	})
	t.Run("absent key is created whatever the cas", func(t *testing.T) {
		s := newStore(t)
		for i, cas := range []uint32{7, 1<<32 - 1} {
			key := fmt.Sprintf("k%d", i)
			if err := s.Set(key, []byte("v"), cas); err != nil {
				t.Fatalf("Set(%s, cas=%d) = %v", key, cas, err)
			}
			v, got, err := s.Get(key)
			// The emulator numbers a created key cas+1, which wraps to 0 for 2^32-1; Envoy
			// never hands out 0.
			if err != nil || string(v) != "v" || (got == 0 && !opts.ZeroCasIsConditional) {
				t.Fatalf("Get(%s) = %q, %d, %v", key, v, got, err)
			}
		}
	})
	t.Run("stale cas is refused and nothing changes", func(t *testing.T) {
		s := newStore(t)
		mustSet(t, s, "k", "a", 1<<32-1)
		_, cas1, _ := s.Get("k")
		mustSet(t, s, "k", "b", cas1)
		_, cas2, _ := s.Get("k")
		if cas2 == cas1 {
			t.Fatalf("cas did not change on write: %d", cas1)
		}
		if err := s.Set("k", []byte("c"), cas1); !errors.Is(err, sharedstate.ErrCasMismatch) {
			t.Fatalf("Set with stale cas = %v, want ErrCasMismatch", err)
		}
		if v, _, _ := s.Get("k"); string(v) != "b" {
			t.Fatalf("value after refused write = %q, want b", v)
		}
	})
	t.Run("returned value belongs to the caller", func(t *testing.T) {
		s := newStore(t)
		mustSet(t, s, "k", "abc", 0)
		v, _, _ := s.Get("k")
		v[0] = 'X'
		if again, _, _ := s.Get("k"); string(again) != "abc" {
			t.Fatalf("store shares its buffer: %q", again)
		}
	})
	// Table writes claims, counts and slot names from buffers it reuses (see Store), so a store
	// that kept the written slice would see its stored value change under it.
	t.Run("written value is copied, not kept", func(t *testing.T) {
		s := newStore(t)
		buf := []byte("abc")
		if err := s.Set("k", buf, 0); err != nil {
			t.Fatal(err)
		}
		buf[0] = 'X'
		if v, _, _ := s.Get("k"); string(v) != "abc" {
			t.Fatalf("store kept the written slice: %q", v)
		}
	})
	if !opts.ZeroCasIsConditional {
		t.Run("cas 0 writes unconditionally", func(t *testing.T) {
			s := newStore(t)
			mustSet(t, s, "k", "a", 0)
			mustSet(t, s, "k", "b", 0)
			if v, _, _ := s.Get("k"); string(v) != "b" {
				t.Fatalf("value = %q, want b", v)
			}
		})
	}
	t.Run("bounded CAS increments lose no update", func(t *testing.T) {
		s := newStore(t)
		workers, per := 1, 200
		if opts.Concurrent {
			workers = 4
		}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					if err := increment(s, "counter"); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		v, _, err := s.Get("counter")
		if err != nil || string(v) != fmt.Sprint(workers*per) {
			t.Fatalf("counter = %q, %v; want %d", v, err, workers*per)
		}
	})
}

func mustSet(t *testing.T, s sharedstate.Store, key, value string, cas uint32) {
	t.Helper()
	if err := s.Set(key, []byte(value), cas); err != nil {
		t.Fatalf("Set(%s) = %v", key, err)
	}
}

func increment(s sharedstate.Store, key string) error {
	for range 10_000 {
		v, cas, err := s.Get(key)
		if errors.Is(err, sharedstate.ErrNotFound) {
			cas = 1<<32 - 1
		} else if err != nil {
			return err
		}
		var n int
		fmt.Sscan(string(v), &n)
		err = s.Set(key, []byte(fmt.Sprint(n+1)), cas)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sharedstate.ErrCasMismatch) {
			return err
		}
	}
	return errors.New("increment: too many CAS conflicts")
}

// Racing is a Store that loses compare-and-swap races on purpose, for tests of what a caller
// does under contention: before a conditional write to a key that exists, a rival writer
// rewrites that key (same value, new CAS number) while Lose returns true, so the write fails
// with ErrCasMismatch exactly as it does when another worker wrote first. Nothing is faked:
// the underlying store decides every outcome.
type Racing struct {
	sharedstate.Store
	// Lose reports whether the write to key should lose its race; nil means always.
	Lose func(key string) bool
	// Lost counts the races lost so far.
	Lost int
}

// Set writes value at key under the store's CAS rules, after the rival's write if it races.
func (r *Racing) Set(key string, value []byte, cas uint32) error {
	if cas != 0 && (r.Lose == nil || r.Lose(key)) {
		if old, rivalCas, err := r.Store.Get(key); err == nil {
			if err := r.Store.Set(key, old, rivalCas); err != nil {
				return err
			}
			r.Lost++
		}
	}
	return r.Store.Set(key, value, cas)
}
