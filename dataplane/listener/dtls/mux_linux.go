package dtls

import (
	"net"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// run reads the socket until it is closed, up to udpio.BatchSize datagrams
// per recvmmsg, and sends what their records carry to peers after each
// batch.
func (m *dtlsMux) run() {
	defer m.closeAll()
	rc := m.rc
	rb := udpio.NewRecvBatch(udpio.BatchSize, 0, dtlsReadBuffer, 0)
	defer rb.Free()
	snd := m.snd
	var (
		res  turn.Result
		n    int
		rerr error
	)
	read := func(fd uintptr) bool {
		n, rerr = rb.Recv(int(fd), unix.MSG_DONTWAIT, false)
		return rerr != unix.EAGAIN
	}
	for {
		if err := rc.Read(read); err != nil {
			return // closed
		}
		if rerr != nil {
			continue
		}
		for i := 0; i < n; i++ {
			if rb.Truncated(i) {
				m.drops.Add(1)
				continue
			}
			m.dispatch(rb.Buf(i)[:rb.Size(i)], rb.From(i), &res)
		}
		snd.flush()
	}
}

// peerSender sends what the reader's records carry to peers, once the
// batch they came in has been handled. Each datagram leaves by a raw
// sendto (udpio.RawSendTo): relay sockets are non-blocking, and a raw
// system call spares the runtime's syscall bookkeeping, which wakes sysmon
// on every call when the reader is the only busy goroutine (perf: sysmon
// took a quarter of the listener's samples with udpio.Batch.Flush at 20k
// packets/s).
type peerSender struct {
	q []peerDatagram
}

func newPeerSender() *peerSender {
	return &peerSender{q: make([]peerDatagram, 0, udpio.BatchSize)}
}

type peerDatagram struct {
	fd int
	p  []byte
	to netip.AddrPort
}

func (s *peerSender) add(fd int, p []byte, to netip.AddrPort) {
	s.q = append(s.q, peerDatagram{fd, p, to})
}

func (s *peerSender) flush() {
	for i := range s.q {
		d := &s.q[i]
		_ = udpio.RawSendTo(d.fd, d.p, d.to)
		d.p = nil
	}
	s.q = s.q[:0]
}

// send sends p to `to` on the listener socket, on the caller's goroutine:
// a raw sendto under RawConn.Control, which keeps the descriptor from
// being closed (and its number reused) meanwhile. It does not wait for
// room: a datagram the socket buffer cannot take is dropped, as UDP may.
func (m *dtlsMux) send(p []byte, to netip.AddrPort) error {
	s := rawSendPool.Get().(*rawSend)
	s.p, s.to = p, to
	err := m.rc.Control(s.fn)
	s.p = nil
	rawSendPool.Put(s)
	return err
}

// rawSend carries a send's arguments into RawConn.Control through a
// function made once, so that a send allocates no closure.
type rawSend struct {
	p  []byte
	to netip.AddrPort
	fn func(fd uintptr)
}

var rawSendPool = sync.Pool{New: func() any {
	s := &rawSend{}
	s.fn = func(fd uintptr) { _ = udpio.RawSendTo(int(fd), s.p, s.to) }
	return s
}}

// setDTLSBuffers sets the socket's SO_RCVBUF and SO_SNDBUF to size bytes,
// past net.core.[rw]mem_max where the process may (udpio.SetBuffers).
func setDTLSBuffers(c *net.UDPConn, size int) {
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { udpio.SetBuffers(int(fd), size) })
	}
}
