package filter

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// decisions.add resets a reused entry field by field (a whole-struct assignment costs a typed
// copy of the struct in a Wasm VM). Every field but the kept buffers must start as a new
// entry's would: a field added to applied and forgotten in add fails here.
func TestDecisionsAddResetsEveryField(t *testing.T) {
	var d decisions
	a := d.add(nil)
	v := reflect.ValueOf(a).Elem()
	for i := range v.NumField() {
		setNonZero(t, v.Field(i))
	}
	a.key = append(a.key[:0], "old key"...)
	keyBuf := &a.key[:1][0]
	d.applied = d.applied[:0]
	rs := &ruleState{}
	b := d.add(rs)
	require.Same(t, a, b, "the entry is reused")
	w := reflect.ValueOf(b).Elem()
	for i := range w.NumField() {
		name := w.Type().Field(i).Name
		switch name {
		case "rs":
			require.Same(t, rs, b.rs)
		case "pending":
			// Reset by Table.Decide; kept for its buffers.
		case "key":
			require.Empty(t, b.key)
			require.Same(t, keyBuf, &b.key[:1][0], "the key buffer is kept")
		default:
			require.True(t, w.Field(i).IsZero(), "field %s is not reset", name)
		}
	}
}

// setNonZero sets an unexported field to a non-zero value of its type.
func setNonZero(t *testing.T, f reflect.Value) {
	t.Helper()
	f = reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem()
	switch f.Kind() {
	case reflect.Bool:
		f.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		f.SetInt(7)
	case reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint8:
		f.SetUint(7)
	case reflect.Pointer:
		f.Set(reflect.New(f.Type().Elem()))
	case reflect.Slice:
		f.Set(reflect.MakeSlice(f.Type(), 1, 8))
	case reflect.Func:
		f.Set(reflect.MakeFunc(f.Type(), func([]reflect.Value) []reflect.Value { return nil }))
	case reflect.Struct:
		for i := range f.NumField() {
			setNonZero(t, f.Field(i))
		}
	case reflect.Array:
		for i := range f.Len() {
			setNonZero(t, f.Index(i))
		}
	default:
		t.Fatalf("setNonZero: kind %s", f.Kind())
	}
}
