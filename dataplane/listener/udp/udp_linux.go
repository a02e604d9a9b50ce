package udp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/internal/sysblock"
	"github.com/tern-gw/tern/turn"
)

// reusePortBalances: Linux spreads datagrams over SO_REUSEPORT sockets by
// 5-tuple hash, so one client always reaches the same worker.
const reusePortBalances = true

// listenerSlot is the largest client datagram a listener worker reads, in
// bytes; larger ones are dropped as truncated. It fits jumbo frames.
const listenerSlot = 9216

// unshared returns an error when another socket, of another process or
// of another listener, is bound where a listener is about to bind addr.
// SO_REUSEPORT lets any socket of the same user join a group on the same
// address, and the kernel then spreads clients over every socket of the
// group by hash: a second ternd on the address (another Gateway on the
// same port of a node's network, whose pods declare no ports when they
// hand over and so share a node) would silently serve some of this one's
// clients, with its own config. A socket bound without SO_REUSEPORT cannot
// share an address, so binding one first, and closing it, finds any
// holder. Port 0 (a port of the kernel's choosing) cannot be shared and is
// not checked. The errors name the address; an EADDRINUSE is wrapped.
func unshared(addr netip.AddrPort) error {
	if addr.Port() == 0 {
		return nil
	}
	fd, err := udpio.Socket(addr, udpio.SocketOptions{DualStack: true})
	if errors.Is(err, unix.EADDRINUSE) {
		return fmt.Errorf("%v is already bound by another socket (another ternd, or another program, on this host's network): %w", addr, err)
	}
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// udpSocket is one SO_REUSEPORT socket of a UDP listener and its worker.
type udpSocket struct {
	fd    int
	rc    syscall.RawConn // poller mode: the runtime's handle, to park on readiness
	conn  *net.UDPConn
	l     *Listener
	stats stats.Worker
	// sb is the worker's send batch, which Reply and Forward (core.Sink)
	// fill; the worker flushes it after each batch it reads.
	sb *udpio.Batch
	// src is the destination address of the datagram the worker is
	// answering, the source of its Reply, on a wildcard listener (the zero
	// Addr on others: the socket's own address is the source).
	src netip.Addr
}

// openUDPSocket binds a listener socket. In poller mode it is non-blocking
// and registered with the Go runtime's netpoller; in threads mode it is a
// blocking socket whose worker blocks in recvmmsg in its own thread. On an
// unspecified address (0.0.0.0 or ::) it serves both families, as the
// TCP, TLS and DTLS listeners do (udpio.SocketOptions.DualStack).
func openUDPSocket(addr netip.AddrPort, bufSize int, mode udpio.Mode) (*udpSocket, error) {
	s := &udpSocket{}
	opts := udpio.SocketOptions{ReusePort: true, Buffer: bufSize, DualStack: true, PacketInfo: addr.Addr().IsUnspecified()}
	if mode == udpio.Threads {
		fd, err := udpio.Socket(addr, opts)
		if err != nil {
			return nil, err
		}
		s.fd = fd
		// A receive timeout lets a blocked worker notice a close even if
		// the shutdown wake-up is missed.
		tv := unix.Timeval{Sec: 1}
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		return s, nil
	}
	network := udpNetwork(addr.Addr())
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = udpio.SetOptions(int(fd), opts) }); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, err
	}
	s.conn = pc.(*net.UDPConn)
	if s.rc, err = s.conn.SyscallConn(); err != nil {
		s.conn.Close()
		return nil, err
	}
	_ = s.rc.Control(func(fd uintptr) { s.fd = int(fd) })
	return s, nil
}

// serve is the listener worker: it reads a batch with recvmmsg, runs the
// engine on each packet and writes what the batch produced with sendmmsg:
// replies on this socket, relayed payloads grouped per relay socket.
// Nothing here allocates per packet.
func (s *udpSocket) serve() {
	rb := udpio.NewRecvBatch(udpio.BatchSize, 0, listenerSlot, 0)
	defer rb.Free()
	if s.l.wild {
		rb.RecvDest()
	}
	s.sb = udpio.NewSendBatch(udpio.BatchSize, s.l.env.GSO)
	if s.rc == nil {
		// Threads mode: block in recvmmsg, for the first datagram only
		// (MSG_WAITFORONE). The blocked goroutine holds its thread anyway;
		// locking it would turn every yield into two thread switches.
		defer sysblock.Enter()()
		var y sysblock.Yielder
		linger := sysblock.Linger{Period: s.l.env.Linger}
		for {
			s.l.gate.Park()
			if s.l.closed.Load() {
				return
			}
			y.Maybe()
			var (
				n   int
				err error
			)
			if linger.Wait() {
				n, err = rb.Recv(s.fd, unix.MSG_DONTWAIT, false)
				linger.Polled(n > 0)
			} else {
				n, err = rb.Recv(s.fd, unix.MSG_WAITFORONE, true)
				linger.Woke()
			}
			if s.l.closed.Load() {
				return
			}
			if err == nil && n > 0 {
				s.process(rb, n)
			}
		}
	}
	// Poller mode: the goroutine parks in the netpoller until the socket is
	// readable, then drains it without blocking.
	var (
		n    int
		rerr error
	)
	read := func(fd uintptr) bool {
		n, rerr = rb.Recv(int(fd), unix.MSG_DONTWAIT, false)
		return rerr != unix.EAGAIN
	}
	for {
		s.l.gate.Park()
		if err := s.rc.Read(read); err != nil {
			if s.l.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue // woken by Pause's deadline
		}
		if rerr == nil && n > 0 {
			s.process(rb, n)
		}
	}
}

// process runs the engine on the n datagrams of rb, delivers each result
// (core.Deliver) onto the send batch and flushes it. It counts in the
// worker's own counters, once per batch (per run of same-cluster packets
// for the cluster counters).
func (s *udpSocket) process(rb *udpio.Batch, n int) {
	var (
		l      = s.l
		eng    = l.env.Engine
		st     = &s.stats
		res    turn.Result
		counts core.Counts
	)
	for i := 0; i < n; i++ {
		size := rb.Size(i)
		counts.Received(size)
		if rb.Truncated(i) {
			st.Drops[turn.DropMalformed].Add(1)
			continue
		}
		from := rb.From(i)
		server := l.serverAddr(from)
		if l.wild {
			if to := rb.To(i); to.IsValid() && to.Is4() == server.Addr().Is4() {
				server = netip.AddrPortFrom(to, server.Port())
			}
			s.src = server.Addr()
		}
		ft := turn.FiveTuple{Client: from, Server: server, Proto: turn.ProtoUDP}
		eng.HandleClient(l, ft, rb.Buf(i)[:size], &res)
		_ = core.Deliver(&res, from, s, st, &counts)
	}
	if s.sb.Queued() > 0 {
		s.sb.Flush()
	}
	counts.Flush(st, l.env.NoCounters)
}

// Reply implements core.Sink: the reply joins the batch, from this socket
// and, on a wildcard listener, from the address the request was sent to.
func (s *udpSocket) Reply(msg []byte, client netip.AddrPort) error {
	s.sb.AddFrom(s.fd, msg, client, s.src)
	return nil
}

// Forward implements core.Sink: the payload joins the batch, from the
// relay socket.
func (s *udpSocket) Forward(fd int, p []byte, peer netip.AddrPort) error {
	s.sb.Add(fd, p, peer)
	return nil
}

// shutdown wakes the worker.
func (s *udpSocket) shutdown() {
	if s.conn != nil {
		s.conn.Close()
		return
	}
	_ = unix.Shutdown(s.fd, unix.SHUT_RD)
}

func (s *udpSocket) close() {
	if s.conn == nil {
		_ = unix.Close(s.fd)
	}
}

// canHandOver: Linux listeners can be paused and adopted.
const canHandOver = true

// wakeForPause makes the worker return to its loop: in poller mode a read
// deadline in the past; in threads mode it returns by itself within the
// socket's receive timeout.
func (s *udpSocket) wakeForPause() {
	if s.conn != nil {
		_ = s.conn.SetReadDeadline(time.Now())
	}
}

// resumeMode readies the socket for this process's I/O mode: blocking with
// a receive timeout for threads mode, or registered with the netpoller
// (non-blocking) for poller mode. An adopted socket becomes a net.UDPConn
// here, in poller mode, and no earlier.
func (s *udpSocket) resumeMode(mode udpio.Mode) {
	if s.conn != nil {
		_ = s.conn.SetReadDeadline(time.Time{})
		_ = s.rc.Control(func(fd uintptr) { _ = unix.SetNonblock(int(fd), true) })
		return
	}
	if mode == udpio.Threads {
		_ = unix.SetNonblock(s.fd, false)
		tv := unix.Timeval{Sec: 1}
		_ = unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		return
	}
	d, err := unix.Dup(s.fd)
	if err != nil {
		return // served in threads mode's shape, blocking
	}
	f := os.NewFile(uintptr(d), "udp-listener")
	pc, err := net.FilePacketConn(f) // another duplicate, registered with the netpoller
	f.Close()
	if err != nil {
		return
	}
	_ = unix.Close(s.fd)
	s.conn = pc.(*net.UDPConn)
	s.rc, _ = s.conn.SyscallConn()
	_ = s.rc.Control(func(fd uintptr) { s.fd = int(fd) })
}

// adoptUDPSocket checks that fd is a UDP socket bound to addr's port (and
// address, unless addr is a wildcard) and wraps it, leaving its flags alone.
func adoptUDPSocket(fd int, addr netip.AddrPort) (*udpSocket, error) {
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_DGRAM {
		return nil, fmt.Errorf("descriptor %d is not a UDP socket", fd)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil, err
	}
	var local netip.AddrPort
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		local = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		local = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	default:
		return nil, fmt.Errorf("descriptor %d is not an IP socket", fd)
	}
	if local.Port() != addr.Port() || (!addr.Addr().IsUnspecified() && local.Addr() != addr.Addr()) {
		return nil, fmt.Errorf("socket bound to %s, the listener is %s", local, addr)
	}
	if addr.Addr().IsUnspecified() {
		// A predecessor that did not ask for packet info.
		if err := udpio.SetPacketInfo(fd); err != nil {
			return nil, fmt.Errorf("descriptor %d: IP_PKTINFO: %w", fd, err)
		}
	}
	return &udpSocket{fd: fd}, nil
}
