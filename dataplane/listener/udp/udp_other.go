//go:build !linux

package udp

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// reusePortBalances: elsewhere a listener gets one socket.
const reusePortBalances = false

// unshared: elsewhere the one socket is bound without SO_REUSEPORT, and
// its bind fails on an address in use.
func unshared(netip.AddrPort) error { return nil }

// udpSocket is the portable listener socket: one datagram per system call.
type udpSocket struct {
	conn  *net.UDPConn
	fd    int // for relay workers, which send on it
	l     *Listener
	stats stats.Worker
}

func openUDPSocket(addr netip.AddrPort, bufSize int, _ udpio.Mode) (*udpSocket, error) {
	network := udpNetwork(addr.Addr())
	pc, err := (&net.ListenConfig{}).ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, err
	}
	c := pc.(*net.UDPConn)
	if bufSize > 0 {
		_ = c.SetReadBuffer(bufSize)
		_ = c.SetWriteBuffer(bufSize)
	}
	s := &udpSocket{conn: c, fd: -1}
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { s.fd = int(fd) })
	}
	return s, nil
}

func (s *udpSocket) serve() {
	buf := make([]byte, 65535)
	var (
		res    turn.Result
		counts core.Counts
	)
	eng, st := s.l.env.Engine, &s.stats
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if s.l.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		counts.Received(n)
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		eng.HandleClient(s.l, turn.FiveTuple{Client: from, Server: s.l.serverAddr(from), Proto: turn.ProtoUDP}, buf[:n], &res)
		_ = core.Deliver(&res, from, s, st, &counts)
		counts.Flush(st, s.l.env.NoCounters)
	}
}

// Reply implements core.Sink: one datagram from this socket, now.
func (s *udpSocket) Reply(msg []byte, client netip.AddrPort) error {
	_, err := s.conn.WriteToUDPAddrPort(msg, client)
	return err
}

// Forward implements core.Sink: one datagram from the relay socket, now.
func (s *udpSocket) Forward(fd int, p []byte, peer netip.AddrPort) error {
	return udpio.SendTo(fd, p, peer)
}

func (s *udpSocket) shutdown() { s.conn.Close() }
func (s *udpSocket) close()    {}

// canHandOver: elsewhere listeners are not handed over.
const canHandOver = false

func (s *udpSocket) wakeForPause()         {}
func (s *udpSocket) resumeMode(udpio.Mode) {}

func adoptUDPSocket(int, netip.AddrPort) (*udpSocket, error) {
	return nil, errors.New("taking over listener sockets needs Linux")
}
