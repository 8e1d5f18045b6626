//go:build !linux

package redistest

import "os/exec"

// setDeathSignal does nothing where there is no parent-death signal; t.Cleanup still stops the
// children of a test that ends normally.
func setDeathSignal(cmd *exec.Cmd) {}
