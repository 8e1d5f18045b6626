package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the child when the test binary dies, so a test killed
// by a timeout or a signal leaves no redis-server or webdis behind (checked by hand with
// kill -9 on a test binary). Strictly, the signal follows the OS thread that started the
// child; the Go runtime only retires threads locked by LockOSThread, which this package
// never uses.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
