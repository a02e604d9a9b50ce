//go:build !linux

package udpio

import (
	"net/netip"
	"syscall"
)

// SendTo sends p to `to` on socket fd with one sendto call: the portable
// path, which builds its socket address on the heap. It returns the error of
// the call, if any.
func SendTo(fd int, p []byte, to netip.AddrPort) error {
	var sa syscall.Sockaddr
	if to.Addr().Is4() {
		sa = &syscall.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().As4()}
	} else {
		sa = &syscall.SockaddrInet6{Port: int(to.Port()), Addr: to.Addr().As16()}
	}
	return syscall.Sendto(fd, p, 0, sa)
}

// RawSendTo is SendTo: the raw system call is a Linux optimisation.
func RawSendTo(fd int, p []byte, to netip.AddrPort) error { return SendTo(fd, p, to) }
