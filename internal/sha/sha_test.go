package sha

import (
	"crypto/sha1"
	"crypto/sha256"
	"math/rand/v2"
	"testing"
)

// The sums must equal the standard library's on every length around the padding boundaries
// (55, 56, 63, 64 bytes and their multiples) and on random content, or key digests, hashed
// Redis keys and script names would change.
func TestSumsEqualStandardLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 300; n++ {
		for trial := 0; trial < 3; trial++ {
			msg := make([]byte, n)
			for i := range msg {
				msg[i] = byte(r.Uint32())
			}
			if got, want := Sum256(msg), sha256.Sum256(msg); got != want {
				t.Fatalf("Sum256 of %d bytes: %x, want %x", n, got, want)
			}
			if got, want := Sum1(msg), sha1.Sum(msg); got != want {
				t.Fatalf("Sum1 of %d bytes: %x, want %x", n, got, want)
			}
		}
	}
	big := make([]byte, 1<<20+17)
	if Sum256(big) != sha256.Sum256(big) || Sum1(big) != sha1.Sum(big) {
		t.Fatal("sums of 1 MiB differ")
	}
}

func TestSumsDoNotAllocate(t *testing.T) {
	msg := []byte("192.0.2.1\x00acme")
	if a := testing.AllocsPerRun(100, func() { _ = Sum256(msg); _ = Sum1(msg) }); a != 0 {
		t.Fatalf("%v allocations per run", a)
	}
}

func BenchmarkSum256(b *testing.B) {
	msg := []byte("192.0.2.1\x00acme")
	b.ReportAllocs()
	for b.Loop() {
		_ = Sum256(msg)
	}
}

func BenchmarkStdSum256(b *testing.B) {
	msg := []byte("192.0.2.1\x00acme")
	b.ReportAllocs()
	for b.Loop() {
		_ = sha256.Sum256(msg)
	}
}
