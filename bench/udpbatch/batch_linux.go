//go:build linux

package udpbatch

import (
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/udpio"
)

// half is one direction of a Conn: a udpio batch for the mmsghdrs and
// socket addresses, and the outcome of the last system call. The callback
// is built once so that RawConn.Read/Write does not allocate a closure per
// call.
type half struct {
	b     *udpio.Batch
	n     int // messages lent to a read; messages moved by the last call
	err   error
	flags int  // recvmmsg/sendmmsg flags
	block bool // blocking socket: the system call may park the thread
	fn    func(fd uintptr) bool
}

type sys struct {
	rc      syscall.RawConn
	fd      int
	rd, wr  half
	block   bool
	closing atomic.Bool
	gso     *gsoHalf // WriteGSO's, made on first use
	gro     bool     // EnableGRO: reads report Segs from UDP_GRO
}

// setOptions applies o to a socket that package net opened (Listen).
func setOptions(fd int, o Options) error { return udpio.SetOptions(fd, o.udpio()) }

func (o Options) udpio() udpio.SocketOptions {
	return udpio.SocketOptions{ReusePort: o.ReusePort, Buffer: o.Buffer}
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
	fd, err := udpio.Socket(addr, o.udpio())
	if err != nil {
		return nil, err
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
	a, _ := udpio.LocalAddr(c.fd)
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
	_ = rc.Control(func(fd uintptr) { c.fd = int(fd) })
	c.rd.b = udpio.NewRecvBatch(batch, 0, 0, 0) // ReadBatch lends the callers' buffers
	c.wr.b = udpio.NewSendBatch(batch, false)
	c.rd.fn = func(fd uintptr) bool {
		h := &c.rd
		for {
			n, err := h.b.RecvN(int(fd), h.n, h.flags, h.block)
			if err != unix.EINTR {
				return h.done(n, err)
			}
		}
	}
	c.wr.fn = func(fd uintptr) bool {
		h := &c.wr
		for {
			n, err := h.b.Send(int(fd), h.flags, h.block)
			if err != unix.EINTR {
				return h.done(n, err)
			}
		}
	}
}

// done records the outcome of one recvmmsg/sendmmsg for ReadBatch or
// WriteBatch. On EAGAIN it returns false, so that RawConn.Read/Write waits
// in the runtime poller until the socket is ready and calls again (a
// blocking socket, which the poller does not know, never returns EAGAIN).
// EINTR is retried by the caller at once instead: it moved nothing, and
// the readiness the poller reported may already be consumed.
func (h *half) done(n int, err error) bool {
	if err == unix.EAGAIN {
		return false
	}
	h.n, h.err = n, err
	return true
}

// ReadBatch blocks until at least one datagram arrives and fills up to
// len(ms) messages (at most the batch size of New); it returns how many.
func (c *Conn) ReadBatch(ms []Message) (int, error) {
	h := &c.rd
	n := min(len(ms), h.b.Cap())
	if n == 0 {
		return 0, nil
	}
	for i := range n {
		h.b.SetRecv(i, ms[i].Buf)
	}
	h.n = n
	if err := c.rc.Read(h.fn); err != nil {
		return 0, err
	}
	if h.err != nil {
		return 0, h.err
	}
	if c.block && c.closing.Load() {
		// Close's shutdown woke the read (with an empty "datagram").
		return 0, net.ErrClosed
	}
	for i := range h.n {
		ms[i].N = h.b.Size(i)
		ms[i].Addr = h.b.From(i)
		ms[i].Segs = 1
		if c.gro {
			ms[i].Segs = h.b.Segments(i)
		}
	}
	return h.n, nil
}

// EnableGRO turns UDP generic receive offload on (UDP_GRO, Linux 5.0+):
// a run of same-size datagrams of one flow that GRO joined on the way in
// (a device with rx-gro on), or a UDP GSO packet that arrived whole, is
// read as one Message whose Segs says how many datagrams it holds, back to
// back in Buf — one copy and one slot for all of them, where a counting
// sink would otherwise take each datagram on its own. Give read buffers of
// 64 KiB to take the longest runs whole (the kernel truncates longer ones).
// Call it before reading.
func (c *Conn) EnableGRO() error {
	var err error
	if cerr := c.rc.Control(func(fd uintptr) { err = udpio.SetGRO(int(fd)) }); cerr != nil {
		return cerr
	}
	if err != nil {
		return err
	}
	c.rd.b.RecvDest() // control buffers, which carry UDP_GRO's segment size
	c.gro = true
	return nil
}

// WriteBatch sends every message of ms, in as few system calls as the
// batch size allows, and returns how many were sent. Empty messages are
// sent as empty datagrams.
func (c *Conn) WriteBatch(ms []Message) (int, error) {
	h := &c.wr
	sent := 0
	for sent < len(ms) {
		n := min(len(ms)-sent, h.b.Cap())
		for i := range ms[sent : sent+n] {
			m := &ms[sent+i]
			h.b.Add(c.fd, m.Buf, m.Addr)
		}
		err := c.rc.Write(h.fn)
		h.b.Reset()
		if err != nil {
			return sent, err
		}
		if h.err != nil {
			return sent, h.err
		}
		sent += h.n
	}
	return sent, nil
}
