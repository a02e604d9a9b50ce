//go:build linux

package udpbatch

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// half is the preallocated state of one direction: message headers, one
// iovec each and room for an IPv6 socket address each. The callback is
// built once so that RawConn.Read/Write does not allocate a closure per call.
type half struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	ms    []Message // the batch being moved
	n     int       // messages moved by the last system call
	errno syscall.Errno
	flags uintptr // recvmmsg/sendmmsg flags
	block bool    // blocking socket: retry EINTR here, never wait in the poller
	fn    func(fd uintptr) bool
}

type sys struct {
	rc      syscall.RawConn
	rd, wr  half
	block   bool
	closing atomic.Bool
}

// ListenBlocking opens a blocking UDP socket bound to addr, outside the Go
// netpoller, whose ReadBatch waits in the kernel in its goroutine's own
// thread and returns as soon as one datagram is in (MSG_WAITFORONE). That
// avoids the scheduler wake-up per batch that parking in the netpoller
// costs; use internal/sysblock with it. The socket is opened directly (not
// through net) because a socket the netpoller knows wakes it on every
// datagram even when nobody waits there. Close shuts the socket down first,
// so a blocked read returns net.ErrClosed. UDPConn returns nil.
func ListenBlocking(addr netip.AddrPort, o Options, batch int) (*Conn, error) {
	domain := unix.AF_INET
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		domain = unix.AF_INET6
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var sa unix.Sockaddr
	if domain == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().Unmap().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	}
	if err := setOptions(fd, o); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %v: %w", addr, err)
	}
	f := os.NewFile(uintptr(fd), "udp "+addr.String()) // blocking: not added to the poller
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	c := &Conn{file: f}
	c.setup(rc, max(batch, 1))
	c.block = true
	c.rd.block, c.wr.block = true, true
	c.rd.flags = unix.MSG_WAITFORONE
	return c, nil
}

// LocalAddr is the address the socket is bound to.
func (c *Conn) LocalAddr() netip.AddrPort {
	var a netip.AddrPort
	_ = c.rc.Control(func(fd uintptr) {
		if sa, err := unix.Getsockname(int(fd)); err == nil {
			switch sa := sa.(type) {
			case *unix.SockaddrInet4:
				a = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
			case *unix.SockaddrInet6:
				a = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
			}
		}
	})
	return a
}

// Writer returns a Conn on the same socket with write state of its own, so
// that another goroutine can WriteBatch concurrently. Closing it does not
// close the socket; do not ReadBatch from it.
func (c *Conn) Writer(batch int) *Conn {
	w := &Conn{uc: c.uc, shared: true}
	w.setup(c.rc, max(batch, 1))
	w.wr.block = c.block
	return w
}

func (c *Conn) shutdown() {
	if c.block {
		c.closing.Store(true)
		_ = c.rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RD) })
	}
}

func (c *Conn) init(batch int) error {
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return err
	}
	c.setup(rc, batch)
	return nil
}

func (c *Conn) setup(rc syscall.RawConn, batch int) {
	c.rc = rc
	for _, h := range []*half{&c.rd, &c.wr} {
		h.hdrs = make([]unix.Mmsghdr, batch)
		h.iovs = make([]unix.Iovec, batch)
		h.names = make([]unix.RawSockaddrInet6, batch)
		for i := range h.hdrs {
			h.hdrs[i].Hdr.Iov = &h.iovs[i]
			h.hdrs[i].Hdr.SetIovlen(1)
			h.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&h.names[i]))
		}
	}
	c.rd.fn = func(fd uintptr) bool { return c.rd.call(fd, unix.SYS_RECVMMSG) }
	c.wr.fn = func(fd uintptr) bool { return c.wr.call(fd, unix.SYS_SENDMMSG) }
}

// call runs one recvmmsg/sendmmsg over h.hdrs[:len(h.ms)]. It returns false
// on EAGAIN so that the runtime poller waits for the socket to be ready.
func (h *half) call(fd uintptr, trap uintptr) bool {
	n := len(h.ms)
	if n > len(h.hdrs) {
		n = len(h.hdrs)
	}
	r, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&h.hdrs[0])), uintptr(n), h.flags, 0, 0)
	for h.block && e == unix.EINTR {
		r, _, e = unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&h.hdrs[0])), uintptr(n), h.flags, 0, 0)
	}
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	h.n, h.errno = int(r), e
	return true
}

// ReadBatch blocks until at least one datagram arrives and fills up to
// len(ms) messages (at most the batch size of New); it returns how many.
func (c *Conn) ReadBatch(ms []Message) (int, error) {
	h := &c.rd
	n := min(len(ms), len(h.hdrs))
	if n == 0 {
		return 0, nil
	}
	for i := 0; i < n; i++ {
		h.iovs[i].Base = &ms[i].Buf[0]
		h.iovs[i].SetLen(len(ms[i].Buf))
		h.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		h.hdrs[i].Len = 0
	}
	h.ms = ms[:n]
	if err := c.rc.Read(h.fn); err != nil {
		return 0, err
	}
	if h.errno != 0 {
		return 0, h.errno
	}
	if c.block && c.closing.Load() {
		// Close's shutdown woke the read (with an empty "datagram").
		return 0, net.ErrClosed
	}
	for i := 0; i < h.n; i++ {
		ms[i].N = int(h.hdrs[i].Len)
		ms[i].Addr = decodeAddr(&h.names[i])
	}
	return h.n, nil
}

// WriteBatch sends every message of ms, in as few system calls as the
// batch size allows, and returns how many were sent. Empty messages are
// sent as empty datagrams.
func (c *Conn) WriteBatch(ms []Message) (int, error) {
	h := &c.wr
	sent := 0
	for sent < len(ms) {
		n := min(len(ms)-sent, len(h.hdrs))
		chunk := ms[sent : sent+n]
		for i := range chunk {
			m := &chunk[i]
			if len(m.Buf) > 0 {
				h.iovs[i].Base = &m.Buf[0]
			} else {
				h.iovs[i].Base = nil
			}
			h.iovs[i].SetLen(len(m.Buf))
			h.hdrs[i].Hdr.Namelen = encodeAddr(&h.names[i], m.Addr)
		}
		h.ms = chunk
		if err := c.rc.Write(h.fn); err != nil {
			return sent, err
		}
		if h.errno != 0 {
			return sent, h.errno
		}
		sent += h.n
	}
	return sent, nil
}

func decodeAddr(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// encodeAddr writes a into sa and returns the socket address length. An
// IPv4 address is written as AF_INET: the bench sockets are IPv4 sockets
// bound on 127.0.0.0/8.
func encodeAddr(sa *unix.RawSockaddrInet6, a netip.AddrPort) uint32 {
	ip := a.Addr()
	if ip.Is4() || ip.Is4In6() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		p[0], p[1] = byte(a.Port()>>8), byte(a.Port())
		sa4.Addr = ip.Unmap().As4()
		sa4.Zero = [8]uint8{}
		return unix.SizeofSockaddrInet4
	}
	sa.Family = unix.AF_INET6
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(a.Port()>>8), byte(a.Port())
	sa.Addr = ip.As16()
	sa.Flowinfo, sa.Scope_id = 0, 0
	return unix.SizeofSockaddrInet6
}
