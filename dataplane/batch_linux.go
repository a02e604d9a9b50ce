package dataplane

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchSize is how many datagrams one recvmmsg or sendmmsg call moves.
const batchSize = 64

// msgBatch is a preallocated vector of mmsghdrs for recvmmsg/sendmmsg, with
// one iovec and one socket address per message, so batch I/O allocates
// nothing per packet.
type msgBatch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	bufs  [][]byte  // receive buffers (recv batches only)
	fds   []int     // destination socket per message (send batches only)
	n     int       // messages queued (send batches only)
	gso   *gsoState // send batches with UDP GSO on; nil sends datagram by datagram
}

func newMsgBatch(n int) *msgBatch {
	b := &msgBatch{
		hdrs:  make([]unix.Mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n),
		fds:   make([]int, n),
	}
	for i := range b.hdrs {
		b.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		b.hdrs[i].Hdr.Iov = &b.iovs[i]
		b.hdrs[i].Hdr.SetIovlen(1)
	}
	return b
}

// newRecvBatch returns a batch whose message i is read into
// bufs[i][headroom:headroom+size].
func newRecvBatch(n, headroom, size, tailroom int) *msgBatch {
	b := newMsgBatch(n)
	b.bufs = make([][]byte, n)
	for i := range b.bufs {
		b.bufs[i] = make([]byte, headroom+size+tailroom)
		b.iovs[i].Base = &b.bufs[i][headroom]
		b.iovs[i].SetLen(size)
	}
	return b
}

// recv reads up to len(b.hdrs) datagrams from fd with recvmmsg. blocking
// selects a real system call that may park the thread (listener sockets)
// over a raw one for non-blocking sockets (relay sockets, MSG_DONTWAIT).
func (b *msgBatch) recv(fd int, flags int, blocking bool) (int, error) {
	for i := range b.hdrs {
		b.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		b.hdrs[i].Hdr.Flags = 0
	}
	var (
		r  uintptr
		en unix.Errno
	)
	if blocking {
		r, _, en = unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(len(b.hdrs)), uintptr(flags), 0, 0)
	} else {
		r, _, en = unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(len(b.hdrs)), uintptr(flags), 0, 0)
	}
	if en != 0 {
		return 0, en
	}
	return int(r), nil
}

// from returns the source address of received message i.
func (b *msgBatch) from(i int) netip.AddrPort { return sockaddrAddrPort(&b.names[i]) }

// truncated reports whether received message i did not fit its buffer.
func (b *msgBatch) truncated(i int) bool { return b.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 }

// add queues p for to on fd. p must stay unchanged until flush.
func (b *msgBatch) add(fd int, p []byte, to netip.AddrPort) {
	i := b.n
	if len(p) == 0 {
		b.iovs[i].Base = nil
	} else {
		b.iovs[i].Base = &p[0]
	}
	b.iovs[i].SetLen(len(p))
	b.hdrs[i].Hdr.Namelen = putSockaddr(&b.names[i], to)
	b.fds[i] = fd
	b.n++
}

// flush sends the queued messages, one sendmmsg per run of messages to
// the same socket, and returns how many were sent and how many bytes. A
// message the kernel refuses (no route, buffer full on a non-blocking
// relay socket) is skipped; UDP gives no delivery guarantee anyway.
func (b *msgBatch) flush() (sent, bytes int) {
	queued := b.n
	if b.gso != nil {
		b.coalesce(b.gso)
	}
	for i := 0; i < b.n; {
		j := i + 1
		for j < b.n && b.fds[j] == b.fds[i] {
			j++
		}
		for i < j {
			r, _, en := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(b.fds[i]), uintptr(unsafe.Pointer(&b.hdrs[i])), uintptr(j-i), 0, 0, 0)
			if en == unix.EINTR {
				continue
			}
			if en != 0 || r == 0 {
				if b.gso != nil && b.gso.segs[i] > 1 {
					s, n := b.sendSegments(i, b.gso.segs[i])
					sent, bytes = sent+s, bytes+n
				}
				i++ // skip the message that failed
				continue
			}
			for k := i; k < i+int(r); k++ {
				bytes += int(b.iovs[k].Len)
				if b.gso != nil {
					sent += b.gso.segs[k]
				} else {
					sent++
				}
			}
			i += int(r)
		}
	}
	for k := 0; k < queued; k++ {
		b.iovs[k].Base = nil // do not keep replies alive
	}
	b.n = 0
	return sent, bytes
}

// sockaddrAddrPort decodes a sockaddr_in or sockaddr_in6.
func sockaddrAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
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

// putSockaddr encodes ap as a sockaddr_in (IPv4) or sockaddr_in6 and
// returns its length.
func putSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort) uint32 {
	port := ap.Port()
	if a := ap.Addr(); a.Is4() {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		s4.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		s4.Addr = a.As4()
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

// sockaddrOf is ap for the unix package's socket calls (sockaddr_in for an
// IPv4 address, sockaddr_in6 otherwise).
func sockaddrOf(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// socketFor opens a UDP socket of ap's family bound to ap.
func socketFor(ap netip.AddrPort, nonblock, reusePort bool) (int, error) {
	family := unix.AF_INET
	if ap.Addr().Is6() {
		family = unix.AF_INET6
	}
	typ := unix.SOCK_DGRAM | unix.SOCK_CLOEXEC
	if nonblock {
		typ |= unix.SOCK_NONBLOCK
	}
	fd, err := unix.Socket(family, typ, 0)
	if err != nil {
		return -1, err
	}
	if reusePort {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	if family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	if err := unix.Bind(fd, sockaddrOf(ap)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// setBuffers sets SO_RCVBUF and SO_SNDBUF to size bytes, past
// net.core.rmem_max when the process may (SO_*BUFFORCE needs CAP_NET_ADMIN).
func setBuffers(fd, size int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
	}
}
