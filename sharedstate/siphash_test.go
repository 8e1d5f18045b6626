package sharedstate

import (
	"github.com/dchest/siphash"

	"encoding/binary"
	"encoding/hex"
	"testing"
)

// The test vectors of SipHash-2-4's reference implementation (key 00 01 .. 0f, message 00 01
// .. n-1), of its 128-bit and its 64-bit output, for every length class: empty, shorter than a
// block, exactly one block, one block plus a tail, two blocks, two blocks plus a tail, three
// blocks, and the longest vector. Lengths 0 and 15 of the 64-bit output are also printed in
// the SipHash paper (appendix A).
func TestSipHashVectors(t *testing.T) {
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
		n       int
		want128 string
		want64  uint64
	}{
		{0, "a3817f04ba25a8e66df67214c7550293", 0x726fdb47dd0e0e31},
		{1, "da87c1d86b99af44347659119b22fc45", 0x74f839c593dc67fd},
		{7, "a1f1ebbed8dbc153c0b84aa61ff08239", 0xab0200f58b01d137},
		{8, "3b62a9ba6258f5610f83e264f31497b4", 0x93f5f5799a932462},
		{15, "5493e99933b0a8117e08ec0f97cfc3d9", 0xa129ca6149be45e5},
		{16, "6ee2a4ca67b054bbfd3315bf85230577", 0x3f2acc7f57c29bdb},
		{17, "473d06e8738db89854c066c47ae47740", 0x699ae9f52cbe4794},
		{24, "2db479ae78bd50d8882a8a178a6132ad", 0xb8ad50c6f649af94},
		{63, "5150d1772f50834a503e069a973fbd7c", 0x958a324ceb064572},
	} {
		lo, hi := siphash.Hash128(k0, k1, msg[:v.n])
		got := hex.EncodeToString(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, lo), hi))
		if got != v.want128 {
			t.Errorf("SipHash-2-4-128 of %d bytes = %s, want %s", v.n, got, v.want128)
		}
		if got := siphash.Hash(k0, k1, msg[:v.n]); got != v.want64 {
			t.Errorf("SipHash-2-4 of %d bytes = %#x, want %#x", v.n, got, v.want64)
		}
	}
}
