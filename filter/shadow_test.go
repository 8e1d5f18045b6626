package filter

import (
	"errors"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/sharedstate"
	"github.com/ratelimit-wasm/ratelimit/sharedstate/memstore"
	"github.com/stretchr/testify/require"
)

// failingStore is a Memory store whose reads or writes of rule slots fail (the
// slot-addressing secret stays readable, so the plugin configures), for tests of what the
// filter does when its shared data fails.
type failingStore struct {
	*memstore.Memory
	failGet, failSet bool
}

var errStoreBroken = errors.New("store broken on purpose")

// Get fails for every rule slot when failGet is set.
func (s *failingStore) Get(key string) ([]byte, uint32, error) {
	if s.failGet && key != sharedstate.SecretKey {
		return nil, 0, errStoreBroken
	}
	return s.Memory.Get(key)
}

// Set fails for every rule slot when failSet is set.
func (s *failingStore) Set(key string, value []byte, cas uint32) error {
	if s.failSet && key != sharedstate.SecretKey {
		return errStoreBroken
	}
	return s.Memory.Set(key, value, cas)
}

// A shadow rule never denies, not even when its store fails under top-level failure_mode
// "deny": it counts the failure in store_errors_total and the request goes through. An
// enforced rule in the same configuration still denies (the failure mode applies to it).
func TestShadowRuleStoreFailureNeverDenies(t *testing.T) {
	const shadow = `{"failure_mode":"deny","rules":[{"name":"dry","shadow":true,
		"algorithm":"fixed_window","limit":5,"window":"1m"}]}`
	const enforced = `{"failure_mode":"deny","rules":[{"name":"dry",
		"algorithm":"fixed_window","limit":5,"window":"1m"}]}`
	for _, c := range []struct {
		name             string
		failGet, failSet bool
	}{{"get fails", true, false}, {"set fails", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			// The store breaks after configure, which reads and writes the rule's bookkeeping.
			store := &failingStore{Memory: memstore.New()}
			d := newNativeWithStore(t, shadow, store)
			store.failGet, store.failSet = c.failGet, c.failSet
			for i := range 3 {
				out := d.Do(t, t0, step{Path: "/x"})
				require.Zero(t, out.Status, "request %d of a shadow rule with a failing store", i)
			}
			m := nativeTableDriver{d}
			require.EqualValues(t, 3, m.Metric(t, "ratelimit_store_errors_total;rule=dry"))
			require.Zero(t, m.Metric(t, "ratelimit_requests_total;rule=dry;decision=shadow_denied"))
			stop(d)

			store.failGet, store.failSet = false, false
			d = newNativeWithStore(t, enforced, store)
			store.failGet, store.failSet = c.failGet, c.failSet
			require.Equal(t, 429, d.Do(t, t0, step{Path: "/x"}).Status, "an enforced rule still fails closed")
			stop(d)
		})
	}
}

// A shadow global rule never denies, also when Redis fails under redis.failure_mode "deny":
// the failure is counted and the request goes on.
func TestShadowGlobalRuleNeverDeniesOnRedisFailure(t *testing.T) {
	cfg := `{"redis":{"cluster":"webdis","timeout":"40ms","failure_mode":"deny"},
	"rules":[{"name":"g","scope":"global","shadow":true,"key":[{"source":"header","name":"x-api-key"}],
	"algorithm":"gcra","limit":5,"window":"1m"}]}`
	d := newNative(t, cfg)
	id, callout := d.startGlobal(t, "a")
	d.host.CallOnHttpCallResponse(callout, nil, nil, nil) // a reset
	require.Nil(t, d.host.GetSentLocalResponse(id), "a shadow rule denied on a Redis failure")
}
