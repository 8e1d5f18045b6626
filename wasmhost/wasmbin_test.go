package wasmhost

// A tiny WebAssembly binary writer, enough to hand-craft the modules the
// load-time and trap tests need (no toolchain, builds in microseconds).

const (
	tI32 = 0x7f
	tI64 = 0x7e
)

type wImport struct {
	module, name    string
	params, results []byte
}

type wFunc struct {
	export          string
	params, results []byte
	code            []byte // instructions without the final end
}

func uleb(v uint64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, b|0x80)
			continue
		}
		return append(out, b)
	}
}

func sleb(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

func wstr(s string) []byte { return append(uleb(uint64(len(s))), s...) }

func wvec(items [][]byte) []byte {
	out := uleb(uint64(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func section(id byte, content []byte) []byte {
	return append(append([]byte{id}, uleb(uint64(len(content)))...), content...)
}

// Instructions.
func iConst(v int32) []byte   { return append([]byte{0x41}, sleb(int64(v))...) }
func iConst64(v int64) []byte { return append([]byte{0x42}, sleb(v)...) }
func call(idx int) []byte     { return append([]byte{0x10}, uleb(uint64(idx))...) }

var (
	iDrop        = []byte{0x1a}
	iUnreachable = []byte{0x00}
)

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// buildWasm writes a module with the imports (function indexes 0..), the
// functions (indexes after the imports) and one exported memory.
func buildWasm(imports []wImport, funcs []wFunc) []byte {
	var types [][]byte
	functype := func(p, r []byte) int {
		types = append(types, cat([]byte{0x60}, uleb(uint64(len(p))), p, uleb(uint64(len(r))), r))
		return len(types) - 1
	}
	var imps, fnIdx, exps, bodies [][]byte
	for _, im := range imports {
		ti := functype(im.params, im.results)
		imps = append(imps, cat(wstr(im.module), wstr(im.name), []byte{0x00}, uleb(uint64(ti))))
	}
	for i, f := range funcs {
		ti := functype(f.params, f.results)
		fnIdx = append(fnIdx, uleb(uint64(ti)))
		if f.export != "" {
			exps = append(exps, cat(wstr(f.export), []byte{0x00}, uleb(uint64(len(imports)+i))))
		}
		body := cat([]byte{0x00}, f.code, []byte{0x0b}) // no locals
		bodies = append(bodies, cat(uleb(uint64(len(body))), body))
	}
	exps = append(exps, cat(wstr("memory"), []byte{0x02, 0x00}))
	out := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	out = append(out, section(1, wvec(types))...)
	if len(imps) > 0 {
		out = append(out, section(2, wvec(imps))...)
	}
	out = append(out, section(3, wvec(fnIdx))...)
	out = append(out, section(5, cat([]byte{0x01, 0x00}, uleb(2)))...) // one memory, min 2 pages
	out = append(out, section(7, wvec(exps))...)
	out = append(out, section(10, wvec(bodies))...)
	return out
}

var (
	p0   = []byte{}
	pI32 = []byte{tI32}
	p2   = []byte{tI32, tI32}
	p3   = []byte{tI32, tI32, tI32}
	p5   = []byte{tI32, tI32, tI32, tI32, tI32}
)

// minimalFuncs is a well-formed ABI 0.2.1 reactor: _initialize, an
// allocator handing out a fixed buffer, and callbacks that accept everything.
func minimalFuncs() []wFunc {
	return []wFunc{
		{export: "_initialize"},
		{export: "proxy_abi_version_0_2_1"},
		{export: "proxy_on_memory_allocate", params: pI32, results: pI32, code: iConst(4096)},
		{export: "proxy_on_context_create", params: p2},
		{export: "proxy_on_vm_start", params: p2, results: pI32, code: iConst(1)},
		{export: "proxy_on_configure", params: p2, results: pI32, code: iConst(1)},
	}
}

// withFunc replaces (by export name) or appends f.
func withFunc(fs []wFunc, f wFunc) []wFunc {
	out := append([]wFunc(nil), fs...)
	for i := range out {
		if out[i].export == f.export {
			out[i] = f
			return out
		}
	}
	return append(out, f)
}

func withoutFunc(fs []wFunc, export string) []wFunc {
	var out []wFunc
	for _, f := range fs {
		if f.export != export {
			out = append(out, f)
		}
	}
	return out
}
