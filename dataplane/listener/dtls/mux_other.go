//go:build !linux

package dtls

import (
	"net/netip"
	"syscall"
	"time"

	"github.com/tern-gw/tern/turn"
)

// run reads the socket until it is closed, one datagram at a time.
func (m *dtlsMux) run() {
	buf := make([]byte, dtlsReadBuffer)
	var res turn.Result
	for {
		n, from, err := m.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if m.parked() {
				continue
			}
			if m.closed.Load() {
				m.closeAll()
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		m.dispatch(buf[:n], from, netip.Addr{}, &res)
	}
}

// setPacketInfo: other platforms leave the source to the kernel.
func setPacketInfo(syscall.RawConn) bool { return false }
