package v8

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// sharedDataCheck drives host.js's SharedData as the proxy_get_shared_data and
// proxy_set_shared_data functions do (keys and values as bytes of a memory) and throws on the
// first answer that is not Envoy's.
const sharedDataCheck = `'use strict';
const { SharedData, hashBytes, OK, CAS_MISMATCH } = require('./host.js');
const mem = new Uint8Array(1 << 20);
let top = 0;
const put = (s) => { const p = top; for (let i = 0; i < s.length; i++) mem[p + i] = s.charCodeAt(i); top += s.length; return [p, s.length]; };
const sd = new SharedData();
const a = sd.store('a'), b = sd.store('b');
const set = (m, k, v, cas) => sd.set(m, mem, ...put(k), ...put(v), cas);
const get = (m, k) => {
  const e = sd.get(m, mem, ...put(k));
  return e < 0 ? undefined : [String.fromCharCode(...sd.value(e)), sd.cas(e)];
};
const eq = (got, want, what) => {
  if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(what + ': got ' + JSON.stringify(got) + ', want ' + JSON.stringify(want));
};
eq(get(a, 'k'), undefined, 'an absent key');
eq(set(a, 'k', 'one', 77), OK, 'an absent key is written whatever CAS is');
eq(get(a, 'k'), ['one', 1], 'the first CAS is 1');
eq(get(b, 'k'), undefined, 'another vm_id does not see the key');
eq(set(a, 'k', 'two', 77), CAS_MISMATCH, 'a stale CAS');
eq(set(a, 'k', 'two', 1), OK, 'the current CAS');
eq(set(a, 'k', 'a longer value than the first', 0), OK, 'CAS 0 writes unconditionally');
eq(get(a, 'k'), ['a longer value than the first', 3], 'a value that outgrew its room');
eq(set(a, 'k', 'x', 3), OK, 'a shorter value');
eq(get(a, 'k'), ['x', 4], 'a shorter value');
const [vp] = put('v'); eq(sd.set(b, mem, ...put('k'), vp, 1, 0), OK, 'the same key of vm_id b');
mem[vp] = 'w'.charCodeAt(0);
eq(get(b, 'k'), ['v', 5], 'a value is copied in');
eq(get(a, 'k'), ['x', 4], 'vm_id a keeps its value');
sd.nextCas = 0xffffffff;
eq(set(b, 'k', 'z', 0), OK, 'the CAS counter wraps');
eq(get(b, 'k'), ['z', 1], 'the CAS counter skips 0');
// Two keys of the same length and hash (found by a search) are two entries.
const [x, y] = ['key0132461', 'key0800910'];
const hashOf = (k) => { const [p, n] = put(k); return hashBytes(mem, p, n); };
eq(hashOf(x), hashOf(y), 'the hashes of ' + x + ' and ' + y);
eq(set(a, x, 'X', 0), OK, x);
eq(get(a, y), undefined, y + ' shares ' + x + "'s hash");
eq(set(a, y, 'Y', 0), OK, y);
eq([get(a, x)[0], get(a, y)[0]], ['X', 'Y'], 'keys that share a hash');
eq(sd.size, 4, 'entries');
// Many keys (the table of a vm_id grows) keep their values.
for (let i = 0; i < 5000; i++) eq(set(b, 'n' + i, String(i), 0), OK, 'n' + i);
for (let i = 0; i < 5000; i++) eq(get(b, 'n' + i)[0], String(i), 'n' + i);
eq(get(b, 'k')[0], 'z', 'k after the table grew');
`

// The shared data of the V8 host keeps Envoy's rules: keys per vm_id, CAS numbers from 1 that
// skip 0, a stale CAS refused, CAS 0 and an absent key written unconditionally, values copied
// in, values that change size, keys whose hashes collide, and many keys.
func TestV8HostSharedData(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(ErrNoNode)
		}
		t.Skip(ErrNoNode)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "host.js"), hostJS, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "check.js"), []byte(sharedDataCheck), 0o644))
	out, err := exec.Command(node, filepath.Join(dir, "check.js")).CombinedOutput()
	require.NoError(t, err, "%s", out)
}
