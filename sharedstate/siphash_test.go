package sharedstate

import (
	"encoding/binary"
	"testing"
)

// The test vectors of SipHash-2-4's reference implementation (key 00 01 .. 0f, message
// 00 01 .. n-1), for every length class: empty, shorter than a block, exactly one block,
// one block plus a tail, two blocks plus a tail. Lengths 0 and 15 are also printed in the
// SipHash paper (appendix A); the others were checked with an independent implementation.
func TestSipHash24Vectors(t *testing.T) {
	var key [16]byte
	for i := range key {
		key[i] = byte(i)
	}
	k0, k1 := binary.LittleEndian.Uint64(key[:8]), binary.LittleEndian.Uint64(key[8:])
	msg := make([]byte, 64)
	for i := range msg {
		msg[i] = byte(i)
	}
	for _, v := range []struct {
		n    int
		want uint64
	}{
		{0, 0x726fdb47dd0e0e31},
		{1, 0x74f839c593dc67fd},
		{7, 0xab0200f58b01d137},
		{8, 0x93f5f5799a932462},
		{15, 0xa129ca6149be45e5},
		{16, 0x3f2acc7f57c29bdb},
		{17, 0x699ae9f52cbe4794},
		{63, 0x958a324ceb064572},
	} {
		if got := sipHash24(k0, k1, msg[:v.n]); got != v.want {
			t.Errorf("SipHash-2-4 of %d bytes = %#x, want %#x", v.n, got, v.want)
		}
	}
}

func BenchmarkSlotHash(b *testing.B) {
	digest := Digest([]byte("12:192.0.2.1:55554:acme"))
	b.ReportAllocs()
	var h uint64
	for b.Loop() {
		h += sipHash24(0x0706050403020100, 0x0f0e0d0c0b0a0908, digest[:])
	}
	_ = h
}
