package dtls

import (
	"syscall"

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
	if m.wild {
		rb.RecvDest()
	}
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
			if m.parked() {
				continue // paused for a hand-over, and resumed
			}
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
			m.dispatch(rb.Buf(i)[:rb.Size(i)], rb.From(i), rb.To(i), &res)
		}
		snd.Flush()
	}
}

// setPacketInfo asks the socket for each datagram's destination address
// (udpio.SetPacketInfo) and reports whether it could.
func setPacketInfo(rc syscall.RawConn) bool {
	var err error
	if cerr := rc.Control(func(fd uintptr) { err = udpio.SetPacketInfo(int(fd)) }); cerr != nil {
		return false
	}
	return err == nil
}
