//go:build linux

package udpbatch

import "golang.org/x/sys/unix"

func setOptions(fd int, o Options) error {
	if o.ReusePort {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return err
		}
	}
	if o.Buffer > 0 {
		// The FORCE variants need CAP_NET_ADMIN; without it fall back to the
		// plain options, which the kernel caps at net.core.[rw]mem_max.
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, o.Buffer) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, o.Buffer)
		}
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, o.Buffer) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, o.Buffer)
		}
	}
	return nil
}
