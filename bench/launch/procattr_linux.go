//go:build linux

package launch

import "syscall"

// procAttr asks the kernel to SIGTERM a launched server when the harness
// dies, so a crashed or killed ternbench does not leave servers holding the
// bench ports (and answering the next run's clients).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
