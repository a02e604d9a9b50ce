//go:build !linux

package dtls

import (
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
