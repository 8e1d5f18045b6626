package wasmhost

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"
)

// The WASI functions Envoy registers (proxy-wasm-cpp-host exports.cc), with
// its results: stdout/stderr go to the log, files do not exist, there are no
// arguments, the environment is vm_config.environment_variables, and
// proc_exit only logs. wazero's own WASI module is deliberately not used: it
// offers more than Envoy does, and a module relying on that would pass here
// and fail in Envoy.

func wret(stack []uint64, errno uint32) { stack[0] = uint64(errno) }

// memErrno is the errno of a WASI call whose last step writes its result through a guest
// pointer: success, or EFAULT when the pointer is out of bounds.
func memErrno(ok bool) uint32 {
	if ok {
		return errnoSuccess
	}
	return errnoFault
}

// monoBase anchors the WASI monotonic clock; the offset keeps it far from 0
// like a real steady clock.
var monoBase = time.Now()

func wFdWrite(v *vm, stack []uint64) {
	fd, iovs, iovsLen, nwrittenPtr := u32(stack, 0), u32(stack, 1), u32(stack, 2), u32(stack, 3)
	if fd != 1 && fd != 2 {
		wret(stack, errnoBadf)
		return
	}
	buf := &v.stdio[fd-1]
	written := 0
	for i := uint32(0); i < iovsLen; i++ {
		iov, ok := v.mem.Read(iovs+i*8, 8)
		if !ok {
			wret(stack, errnoFault)
			return
		}
		ptr, n := binary.LittleEndian.Uint32(iov), binary.LittleEndian.Uint32(iov[4:])
		if n == 0 {
			continue
		}
		b, ok := v.mem.Read(ptr, n)
		if !ok {
			wret(stack, errnoFault)
			return
		}
		buf.Write(b)
		written += len(b)
	}
	v.emitStdio(fd, false)
	wret(stack, memErrno(v.mem.WriteUint32Le(nwrittenPtr, uint32(written))))
}

// emitStdio logs the complete lines written to stdout (info) or stderr
// (error). Envoy logs every fd_write call as one entry; the Go runtime
// prints a panic in dozens of tiny writes, so the host joins them into
// lines, and flushes a partial line when the call into the VM ends.
func (v *vm) emitStdio(fd uint32, flush bool) {
	level, source := LogInfo, SourceStdout
	if fd == 2 {
		level, source = LogError, SourceStderr
	}
	buf := &v.stdio[fd-1]
	for {
		b := buf.Bytes()
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		v.h.log(v, v.activeID(), level, source, string(b[:i]))
		buf.Next(i + 1)
	}
	if flush && buf.Len() > 0 {
		v.h.log(v, v.activeID(), level, source, buf.String())
		buf.Reset()
	}
}

func wFdRead(_ *vm, stack []uint64) { wret(stack, errnoNosys) }

// Envoy logs fd_seek and fd_close at trace level and reports success.
func wFdSeek(v *vm, stack []uint64) {
	v.h.log(v, v.activeID(), LogTrace, SourceHost, "wasi_unstable fd_seek")
	wret(stack, errnoSuccess)
}

func wFdClose(v *vm, stack []uint64) {
	v.h.log(v, v.activeID(), LogTrace, SourceHost, "wasi_unstable fd_close")
	wret(stack, errnoSuccess)
}

func wFdFdstatGet(v *vm, stack []uint64) {
	fd, ptr := u32(stack, 0), u32(stack, 1)
	if fd != 1 && fd != 2 {
		wret(stack, errnoBadf)
		return
	}
	var st [24]byte
	binary.LittleEndian.PutUint64(st[8:], 64) // fs_rights_base = FD_WRITE
	wret(stack, memErrno(v.mem.Write(ptr, st[:])))
}

func wFdFdstatSetFlags(_ *vm, stack []uint64) { wret(stack, errnoNosys) }

// fd_filestat_get is one of the stubs Envoy 1.39 added; there are no files.
func wFdFilestatGet(_ *vm, stack []uint64) { wret(stack, errnoBadf) }

func wEnvironGet(v *vm, stack []uint64) {
	arr, buf := u32(stack, 0), u32(stack, 1)
	for _, e := range v.h.envList {
		if !v.mem.WriteUint32Le(arr, buf) || !v.mem.WriteString(buf, e) || !v.mem.WriteByte(buf+uint32(len(e)), 0) {
			wret(stack, errnoFault)
			return
		}
		arr += 4
		buf += uint32(len(e)) + 1
	}
	wret(stack, errnoSuccess)
}

func wEnvironSizesGet(v *vm, stack []uint64) {
	size := 0
	for _, e := range v.h.envList {
		size += len(e) + 1
	}
	wret(stack, memErrno(v.mem.WriteUint32Le(u32(stack, 0), uint32(len(v.h.envList))) && v.mem.WriteUint32Le(u32(stack, 1), uint32(size))))
}

func wArgsGet(_ *vm, stack []uint64) { wret(stack, errnoSuccess) }

func wArgsSizesGet(v *vm, stack []uint64) {
	wret(stack, memErrno(v.mem.WriteUint32Le(u32(stack, 0), 0) && v.mem.WriteUint32Le(u32(stack, 1), 0)))
}

func wClockTimeGet(v *vm, stack []uint64) {
	id, ptr := u32(stack, 0), u32(stack, 2)
	var t uint64
	switch id {
	case 0: // realtime
		t = uint64(v.h.clock().UnixNano())
	case 1: // monotonic
		t = uint64(time.Since(monoBase) + time.Hour)
	default:
		wret(stack, errnoNotsup)
		return
	}
	wret(stack, memErrno(v.mem.WriteUint64Le(ptr, t)))
}

// clock_res_get is one of the stubs Envoy 1.39 added.
func wClockResGet(v *vm, stack []uint64) {
	if id := u32(stack, 0); id != 0 && id != 1 {
		wret(stack, errnoNotsup)
		return
	}
	wret(stack, memErrno(v.mem.WriteUint64Le(u32(stack, 1), 1)))
}

func wRandomGet(v *vm, stack []uint64) {
	ptr, n := u32(stack, 0), u32(stack, 1)
	if n > wasiRandomMax {
		wret(stack, errnoInval)
		return
	}
	buf, ok := v.mem.Read(ptr, n)
	if !ok {
		wret(stack, errnoFault)
		return
	}
	_, _ = rand.Read(buf)
	wret(stack, errnoSuccess)
}

func wSchedYield(_ *vm, stack []uint64) { wret(stack, errnoSuccess) }

// poll_oneoff: Envoy <= 1.38 has an ENOSYS stub (the Go runtime throws on
// it when it needs to sleep); >= 1.39 reports success with zero events, so
// the Go scheduler spins until its timer has expired.
func wPollOneoff(v *vm, stack []uint64) {
	if v.h.opts.PollOneoff == PollOneoffEnvoy138 {
		wret(stack, errnoNosys)
		return
	}
	wret(stack, memErrno(v.mem.WriteUint32Le(u32(stack, 3), 0)))
}

// proc_exit only logs in Envoy and returns to the guest.
func wProcExit(v *vm, stack []uint64) {
	v.h.log(v, v.activeID(), LogError, SourceHost, fmt.Sprintf("wasi proc_exit(%d) called; Envoy only logs it and returns to the guest", u32(stack, 0)))
}

// path_open: there are no preopened directories, so no path can be opened.
func wPathOpen(_ *vm, stack []uint64) { wret(stack, errnoBadf) }

// fd_prestat_get: EBADF tells the guest's libc there are no preopens.
func wFdPrestatGet(_ *vm, stack []uint64) { wret(stack, errnoBadf) }

func wFdPrestatDirName(_ *vm, stack []uint64) { wret(stack, errnoNosys) }
