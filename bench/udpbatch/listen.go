package udpbatch

import (
	"context"
	"net"
	"net/netip"
	"syscall"
)

// Options are socket options for Listen.
type Options struct {
	// ReusePort sets SO_REUSEPORT so that several sockets share one
	// address and the kernel spreads clients across them by 5-tuple hash.
	ReusePort bool
	// Buffer is SO_RCVBUF and SO_SNDBUF in bytes; 0 keeps the kernel
	// default. As root the limits of net.core.[rw]mem_max are bypassed
	// (SO_RCVBUFFORCE), so a burst does not overflow a small queue and show
	// up as loss that belongs to the harness rather than the server.
	Buffer int
}

// Listen opens a UDP socket bound to addr (port 0 picks one).
func Listen(addr netip.AddrPort, o Options) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = setOptions(int(fd), o) })
		if err != nil {
			return err
		}
		return serr
	}}
	network := "udp4"
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		network = "udp6"
	}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}
