package wasmtest

import (
	"encoding/binary"
	"errors"
	"strings"
)

// FunctionNames returns the function names of a module's name section (the WebAssembly
// specification's custom section "name", subsection 1), which the Go linker writes unless
// -ldflags=-s is given, by function index (imports first, as in the module's function index
// space).
func FunctionNames(module []byte) (map[uint32]string, error) {
	errBad := errors.New("malformed module")
	r := module
	if len(r) < 8 || string(r[:4]) != "\x00asm" {
		return nil, errBad
	}
	r = r[8:]
	// uvarint reads an unsigned LEB128 number (binary.Uvarint reads the same encoding).
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, false
		}
		r = r[n:]
		return v, true
	}
	for len(r) > 0 {
		id := r[0]
		r = r[1:]
		size, ok := uvarint()
		if !ok || size > uint64(len(r)) {
			return nil, errBad
		}
		sec := r[:size]
		r = r[size:]
		if id != 0 {
			continue
		}
		rest := r
		r = sec
		nameLen, ok := uvarint()
		if !ok || nameLen > uint64(len(r)) || string(r[:nameLen]) != "name" {
			r = rest
			continue
		}
		r = r[nameLen:]
		for len(r) > 0 {
			sub := r[0]
			r = r[1:]
			subSize, ok := uvarint()
			if !ok || subSize > uint64(len(r)) {
				return nil, errBad
			}
			if sub != 1 {
				r = r[subSize:]
				continue
			}
			r = r[:subSize]
			count, ok := uvarint()
			if !ok {
				return nil, errBad
			}
			names := make(map[uint32]string, count)
			for range count {
				idx, ok := uvarint()
				if !ok {
					return nil, errBad
				}
				n, ok := uvarint()
				if !ok || n > uint64(len(r)) {
					return nil, errBad
				}
				names[uint32(idx)] = string(r[:n])
				r = r[n:]
			}
			return names, nil
		}
		return nil, errors.New("the name section has no function names")
	}
	return nil, errors.New("the module has no name section")
}

// LinkerName is a function's name as the Go linker writes it in the name section: every
// character other than an ASCII letter, a digit, '_' or '.' becomes '_' (cmd/link/internal/wasm
// replaces each match of `[^\w.]`).
func LinkerName(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, name)
}
