package sharedstate_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/stretchr/testify/require"
)

// interleaved is the in-memory store with another writer that adds 1 to the counter at key
// between this writer's Get and Set, the first races times.
type interleaved struct {
	*sharedstate.Memory
	races int
}

func (s *interleaved) Set(key string, value []byte, cas uint32) error {
	if s.races > 0 {
		s.races--
		_, err := sharedstate.Update(s.Memory, key, 1, increment)
		if err != nil {
			return err
		}
	}
	return s.Memory.Set(key, value, cas)
}

func increment(cur []byte) []byte {
	var n uint32
	if len(cur) == 4 {
		n = binary.LittleEndian.Uint32(cur)
	}
	return binary.LittleEndian.AppendUint32(nil, n+1)
}

func counter(t *testing.T, s sharedstate.Store, key string) uint32 {
	t.Helper()
	v, _, err := s.Get(key)
	require.NoError(t, err)
	require.Len(t, v, 4)
	return binary.LittleEndian.Uint32(v)
}

// TestUpdateCountsEveryWriter checks that a lost race is retried on the value the other writer
// stored, so that no increment is lost, including when both writers create the key.
func TestUpdateCountsEveryWriter(t *testing.T) {
	s := &interleaved{Memory: sharedstate.NewMemory(), races: 3}
	lost, err := sharedstate.Update(s, "n", 8, increment)
	require.NoError(t, err)
	require.Equal(t, 3, lost)
	// The other writer's 3 increments (the first of them created the key while this writer
	// was about to create it too) and this writer's 1.
	require.Equal(t, uint32(4), counter(t, s, "n"))
}

// TestUpdateExhausted checks that a writer that loses every attempt reports
// ErrAttemptsExhausted and leaves the other writers' values in place.
func TestUpdateExhausted(t *testing.T) {
	s := &interleaved{Memory: sharedstate.NewMemory(), races: 5}
	lost, err := sharedstate.Update(s, "n", 3, increment)
	require.ErrorIs(t, err, sharedstate.ErrAttemptsExhausted)
	require.Equal(t, 3, lost)
	require.Equal(t, uint32(3), counter(t, s, "n"))
}

// failing is a store whose reads fail with a host error.
type failing struct{ sharedstate.Memory }

var errHost = errors.New("host: shared data unavailable")

func (*failing) Get(string) ([]byte, uint32, error) { return nil, 0, errHost }

// TestUpdateStoreError checks that a host error ends the update at once, unretried.
func TestUpdateStoreError(t *testing.T) {
	calls := 0
	lost, err := sharedstate.Update(&failing{}, "n", 8, func(cur []byte) []byte { calls++; return cur })
	require.ErrorIs(t, err, errHost)
	require.Zero(t, lost)
	require.Zero(t, calls)
}
