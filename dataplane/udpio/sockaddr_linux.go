package udpio

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// decodeSockaddr decodes a sockaddr_in or sockaddr_in6; an IPv4-mapped
// IPv6 address comes back as IPv4, so that one client has one 5-tuple.
func decodeSockaddr(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// encodeSockaddr writes ap into sa as a sockaddr_in (IPv4) or sockaddr_in6
// and returns its length in bytes. An IPv4-mapped IPv6 address (which
// net.UDPAddr.AddrPort returns for a 16-byte IPv4 address) is written as
// sockaddr_in: an AF_INET socket refuses a sockaddr_in6, and a dual-stack
// AF_INET6 socket accepts a sockaddr_in, so that form reaches the peer from
// either kind of socket.
func encodeSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort) uint32 {
	port := ap.Port()
	if a := ap.Addr(); a.Is4() || a.Is4In6() {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		s4.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		s4.Addr = a.Unmap().As4()
		s4.Zero = [8]uint8{}
		return unix.SizeofSockaddrInet4
	}
	sa.Family = unix.AF_INET6
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	sa.Flowinfo = 0
	sa.Addr = ap.Addr().As16()
	sa.Scope_id = 0
	return unix.SizeofSockaddrInet6
}

// RawSendTo is SendTo on a non-blocking socket by a raw system call, which
// skips the runtime's syscall bookkeeping: when the caller is the only busy
// goroutine, that bookkeeping wakes sysmon on every call (perf: sysmon took
// a quarter of the DTLS listener's samples at 20k packets/s). The socket
// must not block, or the thread blocks with it unseen by the scheduler. It
// returns the errno, if any; EINTR is retried.
func RawSendTo(fd int, p []byte, to netip.AddrPort) error {
	return sendTo(unix.RawSyscall6, fd, p, to)
}

// LocalAddr returns the address socket fd is bound to, decoded as Batch.From
// decodes a source, or the errno of getsockname. Unlike unix.Getsockname it
// allocates nothing.
func LocalAddr(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet6
	n := uint32(unix.SizeofSockaddrInet6)
	_, _, en := unix.RawSyscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&n)))
	if en != 0 {
		return netip.AddrPort{}, en
	}
	return decodeSockaddr(&sa), nil
}

// SendTo sends p to `to` on socket fd with one sendto call. Unlike
// unix.Sendto it builds the socket address on the stack, so a send
// allocates nothing: it is the single-datagram path of connection-oriented
// listeners relaying to peers. It returns the errno, if any.
func SendTo(fd int, p []byte, to netip.AddrPort) error {
	return sendTo(unix.Syscall6, fd, p, to)
}

// sendTo is SendTo and RawSendTo, by the system call entry call.
func sendTo(call func(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err unix.Errno), fd int, p []byte, to netip.AddrPort) error {
	var sa unix.RawSockaddrInet6
	n := encodeSockaddr(&sa, to)
	var base unsafe.Pointer
	if len(p) > 0 {
		base = unsafe.Pointer(&p[0])
	}
	for {
		_, _, en := call(unix.SYS_SENDTO, uintptr(fd), uintptr(base), uintptr(len(p)), 0, uintptr(unsafe.Pointer(&sa)), uintptr(n))
		switch en {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return en
		}
	}
}
