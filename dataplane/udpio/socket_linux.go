package udpio

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// SocketOptions are how Socket sets up a UDP socket.
type SocketOptions struct {
	// NonBlock opens the socket with O_NONBLOCK (relay sockets, read with
	// MSG_DONTWAIT from epoll workers).
	NonBlock bool
	// ReusePort sets SO_REUSEPORT, so that several sockets share one
	// address and the kernel spreads clients across them by 5-tuple hash.
	ReusePort bool
	// Buffer is SO_RCVBUF and SO_SNDBUF in bytes; 0 keeps the kernel's
	// default. With CAP_NET_ADMIN net.core.[rw]mem_max is bypassed.
	Buffer int
	// DualStack makes a socket for an unspecified address (0.0.0.0 or ::)
	// serve both families, as package net does for a wildcard "udp"
	// listener: one AF_INET6 socket bound to :: with IPV6_V6ONLY off, whose
	// IPv4 sources arrive as IPv4-mapped addresses (decodeSockaddr unmaps
	// them). Where the kernel has no IPv6 it falls back to an IPv4 socket.
	DualStack bool
	// PacketInfo reports each datagram's destination address
	// (SetPacketInfo), for a socket on a wildcard address that must answer
	// from the address each client sent to.
	PacketInfo bool
}

// Socket opens a UDP socket of ap's family bound to ap and returns its
// descriptor, or the error of the call that failed, naming the address. An
// IPv6 socket is IPV6_V6ONLY, so IPv4 and IPv6 listeners on one port do not
// collide, unless o.DualStack asks for one socket of both families on an
// unspecified address.
func Socket(ap netip.AddrPort, o SocketOptions) (int, error) {
	family := unix.AF_INET
	if ap.Addr().Is6() && !ap.Addr().Is4In6() {
		family = unix.AF_INET6
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	dual := o.DualStack && ap.Addr().IsUnspecified()
	if dual {
		family, ap = unix.AF_INET6, netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port())
	}
	typ := unix.SOCK_DGRAM | unix.SOCK_CLOEXEC
	if o.NonBlock {
		typ |= unix.SOCK_NONBLOCK
	}
	fd, err := unix.Socket(family, typ, 0)
	if dual && err == unix.EAFNOSUPPORT {
		// A kernel without IPv6 (ipv6.disable=1): IPv4 only.
		family, ap, dual = unix.AF_INET, netip.AddrPortFrom(netip.IPv4Unspecified(), ap.Port()), false
		fd, err = unix.Socket(family, typ, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("socket for %v: %w", ap, err)
	}
	if dual {
		family = dualStack
	}
	if err := setup(fd, family, o); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("socket for %v: %w", ap, err)
	}
	var sa unix.Sockaddr
	if family == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind %v: %w", ap, err)
	}
	return fd, nil
}

// SetOptions applies o's ReusePort and Buffer to an unbound socket fd (for
// sockets that package net opens, from a ListenConfig's Control).
func SetOptions(fd int, o SocketOptions) error { return setup(fd, -1, o) }

// dualStack is setup's family for an AF_INET6 socket that also serves
// IPv4 (IPV6_V6ONLY off).
const dualStack = -2

func setup(fd, family int, o SocketOptions) error {
	if o.ReusePort {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fmt.Errorf("SO_REUSEPORT: %w", err)
		}
	}
	if family == unix.AF_INET6 || family == dualStack {
		// Set either way: the default (net.ipv6.bindv6only) is the
		// machine's, not ours.
		v6only := 1
		if family == dualStack {
			v6only = 0
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v6only); err != nil {
			return fmt.Errorf("IPV6_V6ONLY: %w", err)
		}
	}
	if o.Buffer > 0 {
		SetBuffers(fd, o.Buffer)
	}
	if o.PacketInfo {
		if err := SetPacketInfo(fd); err != nil {
			return fmt.Errorf("IP_PKTINFO: %w", err)
		}
	}
	return nil
}

// SetBuffers sets SO_RCVBUF and SO_SNDBUF to size bytes, past
// net.core.[rw]mem_max when the process may (SO_*BUFFORCE needs
// CAP_NET_ADMIN); without it the kernel caps them at those limits.
func SetBuffers(fd, size int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
	}
}

// SetDontFragment sets DF on everything socket fd sends, by turning path-MTU
// discovery to "do" (RFC 8656 §7.2, DONT-FRAGMENT).
func SetDontFragment(fd int, ipv6 bool) error {
	if ipv6 {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
}
