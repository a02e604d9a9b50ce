package dataplane

import (
	"context"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/internal/sysblock"
	"github.com/tern-gw/tern/turn"
)

// listenerSlot is the largest client datagram a listener worker reads, in
// bytes; larger ones are dropped as truncated. It fits jumbo frames.
const listenerSlot = 9216

// udpSocket is one SO_REUSEPORT socket of a UDP listener and its worker.
type udpSocket struct {
	fd    int
	rc    syscall.RawConn // poller mode: the runtime's handle, to park on readiness
	conn  *net.UDPConn
	l     *udpListener
	stats workerStats
}

// openUDPSocket binds a listener socket. In poller mode it is non-blocking
// and registered with the Go runtime's netpoller; in threads mode it is a
// blocking socket whose worker blocks in recvmmsg in its own thread.
func openUDPSocket(addr netip.AddrPort, bufSize int, mode string) (*udpSocket, error) {
	s := &udpSocket{}
	if mode == IOThreads {
		fd, err := socketFor(addr, false, true)
		if err != nil {
			return nil, err
		}
		s.fd = fd
		// A receive timeout lets a blocked worker notice a close even if
		// the shutdown wake-up is missed.
		tv := unix.Timeval{Sec: 1}
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	} else {
		network := "udp4"
		if addr.Addr().Is6() {
			network = "udp6"
		}
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
			if err != nil {
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
	}
	if bufSize > 0 {
		setBuffers(s.fd, bufSize)
	}
	return s, nil
}

// serve is the listener worker: it reads a batch with recvmmsg, runs the
// engine on each packet and writes what the batch produced with sendmmsg:
// replies on this socket, relayed payloads grouped per relay socket.
// Nothing here allocates per packet.
func (s *udpSocket) serve() {
	rb := newRecvBatch(batchSize, 0, listenerSlot, 0)
	sb := newMsgBatch(batchSize)
	sb.gso = newSendGSO(s.l.srv)
	if s.rc == nil {
		// Threads mode: block in recvmmsg, for the first datagram only
		// (MSG_WAITFORONE). The blocked goroutine holds its thread anyway;
		// locking it would turn every yield into two thread switches.
		defer sysblock.Enter()()
		var y sysblock.Yielder
		for {
			y.Maybe()
			n, err := rb.recv(s.fd, unix.MSG_WAITFORONE, true)
			if s.l.closed.Load() {
				return
			}
			if err == nil && n > 0 {
				s.process(rb, sb, n)
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
		n, rerr = rb.recv(int(fd), unix.MSG_DONTWAIT, false)
		return rerr != unix.EAGAIN
	}
	for {
		if err := s.rc.Read(read); err != nil {
			return // closed
		}
		if rerr == nil && n > 0 {
			s.process(rb, sb, n)
		}
	}
}

// process runs the engine on the n datagrams of rb and flushes sb.
func (s *udpSocket) process(rb, sb *msgBatch, n int) {
	var (
		l                                    = s.l
		eng                                  = l.srv.engine
		st                                   = &s.stats
		res                                  turn.Result
		rxBytes, txBytes, peerTx, peerTxByte uint64
		replies                              uint64
	)
	for i := 0; i < n; i++ {
		size := int(rb.hdrs[i].Len)
		rxBytes += uint64(size)
		if rb.truncated(i) {
			st.drops[turn.DropMalformed].Add(1)
			continue
		}
		from := rb.from(i)
		ft := turn.FiveTuple{Client: from, Server: l.addr, Proto: turn.ProtoUDP}
		eng.HandleClient(l, ft, rb.bufs[i][:size], &res)
		switch res.Kind {
		case turn.Reply:
			sb.add(s.fd, res.Reply, from)
			replies++
			txBytes += uint64(len(res.Reply))
		case turn.Forward:
			if r := forwardRelay(&res); r != nil {
				sb.add(r.sock.fd, res.Payload, res.Peer)
				peerTx++
				peerTxByte += uint64(len(res.Payload))
			}
		default:
			st.drops[res.Drop].Add(1)
		}
	}
	st.rx.Add(uint64(n))
	st.rxBytes.Add(rxBytes)
	if sb.n > 0 {
		sb.flush()
		st.peerTx.Add(peerTx)
		st.peerTxBytes.Add(peerTxByte)
		st.tx.Add(replies)
		st.txBytes.Add(txBytes)
	}
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
