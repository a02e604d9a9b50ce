//go:build !linux

package udpbatch

import "syscall"

func setOptions(fd int, o Options) error {
	if o.Buffer > 0 {
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, o.Buffer)
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, o.Buffer)
	}
	return nil
}
