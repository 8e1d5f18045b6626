package filter

import (
	"errors"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/filter/filtertest"
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
	// rule, when set, limits the failures to that rule's keys.
	rule string
}

// fails says whether the failures apply to key.
func (s *failingStore) fails(key string) bool {
	return key != sharedstate.SecretKey && (s.rule == "" || strings.Contains(key, "|"+s.rule+"|"))
}

var errStoreBroken = errors.New("store broken on purpose")

// Get fails for every rule slot when failGet is set.
func (s *failingStore) Get(key string) ([]byte, uint32, error) {
	if s.failGet && s.fails(key) {
		return nil, 0, errStoreBroken
	}
	return s.Memory.Get(key)
}

// Set fails for every rule slot when failSet is set.
func (s *failingStore) Set(key string, value []byte, cas uint32) error {
	if s.failSet && s.fails(key) {
		return errStoreBroken
	}
	return s.Memory.Set(key, value, cas)
}

// storeFailureDriver is a native driver on a failingStore (filtertest.StoreFailureDriver).
type storeFailureDriver struct {
	nativeTableDriver
	store *failingStore
}

// FailStore makes the store fail for rule's keys.
func (d storeFailureDriver) FailStore(rule string, reads, writes bool) {
	d.store.rule, d.store.failGet, d.store.failSet = rule, reads, writes
}

// A shadow rule never denies, not even when its store fails under top-level failure_mode
// "deny", while an enforced rule still does (filtertest.StoreFailure.CheckShadowNeverDenies);
// wasmhost/moduletest runs the same checks against the compiled module.
func TestShadowRuleStoreFailureNeverDenies(t *testing.T) {
	for _, f := range filtertest.StoreFailures {
		t.Run(f.Name, func(t *testing.T) {
			// The store breaks after configure, which reads and writes the rules' bookkeeping.
			store := &failingStore{Memory: memstore.New()}
			d := newNativeWithStore(t, filtertest.ShadowStoreConfig, store)
			f.CheckShadowNeverDenies(t, storeFailureDriver{nativeTableDriver{d}, store})
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
