//go:build !linux

package dataplane

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/tern-gw/tern/turn"
)

// udpSocket is the portable listener socket: one datagram per system call.
type udpSocket struct {
	conn  *net.UDPConn
	l     *udpListener
	stats workerStats
}

func openUDPSocket(addr netip.AddrPort, bufSize int, _ string) (*udpSocket, error) {
	network := "udp4"
	if addr.Addr().Is6() {
		network = "udp6"
	}
	pc, err := (&net.ListenConfig{}).ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, err
	}
	c := pc.(*net.UDPConn)
	if bufSize > 0 {
		_ = c.SetReadBuffer(bufSize)
		_ = c.SetWriteBuffer(bufSize)
	}
	return &udpSocket{conn: c}, nil
}

func (s *udpSocket) serve() {
	buf := make([]byte, 65535)
	var res turn.Result
	eng, st := s.l.srv.engine, &s.stats
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if s.l.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		st.rx.Add(1)
		st.rxBytes.Add(uint64(n))
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		eng.HandleClient(s.l, turn.FiveTuple{Client: from, Server: s.l.addr, Proto: turn.ProtoUDP}, buf[:n], &res)
		switch res.Kind {
		case turn.Reply:
			if _, err := s.conn.WriteToUDPAddrPort(res.Reply, from); err == nil {
				st.tx.Add(1)
				st.txBytes.Add(uint64(len(res.Reply)))
			}
		case turn.Forward:
			if r := forwardRelay(&res); r != nil && r.sock.send(res.Payload, res.Peer) == nil {
				st.peerTx.Add(1)
				st.peerTxBytes.Add(uint64(len(res.Payload)))
			}
		default:
			st.drops[res.Drop].Add(1)
		}
	}
}

func (s *udpSocket) shutdown() { s.conn.Close() }
func (s *udpSocket) close()    {}
