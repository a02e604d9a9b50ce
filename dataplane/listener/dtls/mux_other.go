//go:build !linux

package dtls

import (
	"net"
	"net/netip"
	"time"

	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// run reads the socket until it is closed, one datagram at a time.
func (m *dtlsMux) run() {
	buf := make([]byte, dtlsReadBuffer)
	var res turn.Result
	for {
		n, from, err := m.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if m.closed.Load() {
				m.closeAll()
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		m.dispatch(buf[:n], from, &res)
	}
}

// peerSender sends each datagram to a peer at once.
type peerSender struct{}

func newPeerSender() *peerSender { return &peerSender{} }

func (*peerSender) add(fd int, p []byte, to netip.AddrPort) { _ = udpio.SendTo(fd, p, to) }

// setDTLSBuffers sets the socket's receive and send buffers to size bytes.
func setDTLSBuffers(c *net.UDPConn, size int) {
	_ = c.SetReadBuffer(size)
	_ = c.SetWriteBuffer(size)
}

// send sends p to `to` on the listener socket.
func (m *dtlsMux) send(p []byte, to netip.AddrPort) error {
	_, err := m.conn.WriteToUDPAddrPort(p, to)
	return err
}
