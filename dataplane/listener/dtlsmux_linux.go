package listener

import (
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// run reads the socket until it is closed, up to udpio.BatchSize datagrams
// per recvmmsg, and sends what their records carry to peers with one
// sendmmsg per relay socket run.
func (m *dtlsMux) run() {
	defer m.closeAll()
	rc, err := m.conn.SyscallConn()
	if err != nil {
		return
	}
	rb := udpio.NewRecvBatch(udpio.BatchSize, 0, dtlsReadBuffer, 0)
	defer rb.Free()
	snd := &peerSender{b: udpio.NewSendBatch(udpio.BatchSize, false)}
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
			m.dispatch(rb.Buf(i)[:rb.Size(i)], rb.From(i), &res, snd)
		}
		snd.flush()
	}
}

// peerSender batches the datagrams the reader sends to peers.
type peerSender struct{ b *udpio.Batch }

func (s *peerSender) add(fd int, p []byte, to netip.AddrPort) {
	if s.b.Full() {
		s.b.Flush()
	}
	s.b.Add(fd, p, to)
}

func (s *peerSender) flush() {
	if s.b.Queued() > 0 {
		s.b.Flush()
	}
}

// setDTLSBuffers sets the socket's SO_RCVBUF and SO_SNDBUF to size bytes,
// past net.core.[rw]mem_max where the process may (udpio.SetBuffers).
func setDTLSBuffers(c *net.UDPConn, size int) {
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { udpio.SetBuffers(int(fd), size) })
	}
}
