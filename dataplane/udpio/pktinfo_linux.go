package udpio

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A socket bound to a wildcard address (0.0.0.0 or ::) that answers with
// plain sendmmsg answers from the source address the route back picks, not
// from the address the client sent to. On a host with several addresses
// (a Kubernetes node with hostNetwork: its own address and the cni0
// bridge's) the two differ, and a client that connect()ed its UDP socket
// to the server, as coturn's turnutils_uclient does, has its kernel drop
// every answer. Packet info fixes that: each received datagram's
// destination address comes with it (IP_PKTINFO, IPV6_RECVPKTINFO), and
// each answer names it as its source (RFC 1122 §4.1.3.5: a UDP reply's
// source is the request's destination).

// pktinfoSpace is the control buffer of one message that carries packet
// info, in bytes: room for an in6_pktinfo, the larger of the two.
var pktinfoSpace = unix.CmsgSpace(unix.SizeofInet6Pktinfo)

// SetPacketInfo asks the kernel to report each datagram's destination
// address on socket fd (Batch.RecvDest, Batch.To): IP_PKTINFO for IPv4
// datagrams, also on a dual-stack IPv6 socket, and IPV6_RECVPKTINFO for
// IPv6 ones. It returns the error of IP_PKTINFO; IPV6_RECVPKTINFO fails on
// an IPv4 socket, where it is not needed.
func SetPacketInfo(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
		return err
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
	return nil
}

// RecvDest gives each message of the receive batch b a control buffer for
// the packet info SetPacketInfo asks for, so that To reports the
// destination address of each datagram received from then on.
func (b *Batch) RecvDest() {
	if b.rctl != nil {
		return
	}
	b.rctl = make([]byte, len(b.hdrs)*pktinfoSpace)
	for i := range b.hdrs {
		b.hdrs[i].Hdr.Control = &b.rctl[i*pktinfoSpace]
	}
}

// To returns the destination address of received message i, IPv4 for an
// IPv4 datagram on a dual-stack socket, or the zero Addr when the batch
// does not receive it (RecvDest) or the kernel sent none.
func (b *Batch) To(i int) netip.Addr {
	if b.rctl == nil {
		return netip.Addr{}
	}
	n := int(b.hdrs[i].Hdr.Controllen)
	c := b.rctl[i*pktinfoSpace : i*pktinfoSpace+min(n, pktinfoSpace)]
	for len(c) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(c) {
			break
		}
		data := c[unix.SizeofCmsghdr:l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			return netip.AddrFrom4(pi.Addr)
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			return netip.AddrFrom16(pi.Addr).Unmap()
		}
		next := unix.CmsgSpace(l - unix.SizeofCmsghdr)
		if next >= len(c) {
			break
		}
		c = c[next:]
	}
	return netip.Addr{}
}

// AddFrom is Add with src as the datagram's source address, for a socket
// bound to a wildcard address that must answer from the address the client
// sent to (see SetPacketInfo). The zero Addr or an unspecified one leaves
// the choice to the kernel, as Add does. src and the destination are of
// one family: an IPv4 src goes with an IPv4 destination, also on a
// dual-stack socket.
func (b *Batch) AddFrom(fd int, p []byte, to netip.AddrPort, src netip.Addr) {
	b.Add(fd, p, to)
	if !src.IsValid() || src.IsUnspecified() {
		return
	}
	i := b.n - 1
	b.srcs[i] = src.Unmap()
	b.setSourceControl(i)
}

// setSourceControl points message i's control at its packet info alone,
// or at none when it has no source: the shape of a message that GSO did
// not coalesce.
func (b *Batch) setSourceControl(i int) {
	if !b.srcs[i].IsValid() {
		b.hdrs[i].Hdr.Control = nil
		b.hdrs[i].Hdr.SetControllen(0)
		return
	}
	c := b.sctl[i*pktinfoSpace : (i+1)*pktinfoSpace]
	n := putPktinfo(c, b.srcs[i])
	b.hdrs[i].Hdr.Control = &c[0]
	b.hdrs[i].Hdr.SetControllen(n)
}

// putPktinfo writes a control message that sets src as the source of a
// datagram into c and returns its space in bytes: IP_PKTINFO with
// ipi_spec_dst for IPv4 (which a dual-stack IPv6 socket takes for an IPv4
// destination too), IPV6_PKTINFO for IPv6. The interface index stays 0, so
// the route still picks the interface.
func putPktinfo(c []byte, src netip.Addr) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	data := c[unix.SizeofCmsghdr:]
	if src.Is4() {
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
		*pi = unix.Inet4Pktinfo{Spec_dst: src.As4()}
		return unix.CmsgSpace(unix.SizeofInet4Pktinfo)
	}
	h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
	h.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
	pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
	*pi = unix.Inet6Pktinfo{Addr: src.As16()}
	return unix.CmsgSpace(unix.SizeofInet6Pktinfo)
}

// sendFrom sends p to `to` on socket fd from src with one sendmsg, through
// call (unix.Syscall6, or unix.RawSyscall6 for a non-blocking socket), or
// with sendto (as SendTo) when src is the zero or an unspecified Addr. It
// builds the message on the stack and allocates nothing. It returns the
// errno, if any; EINTR is retried.
func sendFrom(call func(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err unix.Errno), fd int, p []byte, to netip.AddrPort, src netip.Addr) error {
	if !src.IsValid() || src.IsUnspecified() {
		return sendTo(call, fd, p, to)
	}
	var sa unix.RawSockaddrInet6
	var oob [64]byte
	var iov unix.Iovec
	if len(p) > 0 {
		iov.Base = &p[0]
	}
	iov.SetLen(len(p))
	msg := unix.Msghdr{Name: (*byte)(unsafe.Pointer(&sa)), Namelen: encodeSockaddr(&sa, to), Iov: &iov, Iovlen: 1, Control: &oob[0]}
	msg.SetControllen(putPktinfo(oob[:], src.Unmap()))
	for {
		_, _, en := call(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0, 0, 0, 0)
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
