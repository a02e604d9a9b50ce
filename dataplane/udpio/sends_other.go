//go:build !linux

package udpio

import (
	"net"
	"net/netip"
)

// Sends sends each datagram at once where there is no recvmmsg batch to
// follow (see sends_linux.go).
type Sends struct{}

// NewSends returns a Sends; n is unused.
func NewSends(n int) *Sends { return &Sends{} }

// Add sends p to `to` on fd now.
func (*Sends) Add(fd int, p []byte, to netip.AddrPort) { _ = SendTo(fd, p, to) }

// Flush does nothing: Add has sent.
func (*Sends) Flush() {}

// ConnSender sends on a net.UDPConn.
type ConnSender struct{ c *net.UDPConn }

// NewConnSender returns a sender on c.
func NewConnSender(c *net.UDPConn) (*ConnSender, error) { return &ConnSender{c}, nil }

// SendTo sends p to `to`, returning the write's error.
func (s *ConnSender) SendTo(p []byte, to netip.AddrPort) error {
	_, err := s.c.WriteToUDPAddrPort(p, to)
	return err
}

// SendFrom is SendTo: other platforms leave the source to the kernel.
func (s *ConnSender) SendFrom(p []byte, to netip.AddrPort, _ netip.Addr) error {
	return s.SendTo(p, to)
}

// SetConnBuffers sets c's receive and send buffers to size bytes.
func SetConnBuffers(c *net.UDPConn, size int) {
	_ = c.SetReadBuffer(size)
	_ = c.SetWriteBuffer(size)
}
