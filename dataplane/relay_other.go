//go:build !linux

package dataplane

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/tern-gw/tern/turn"
)

// relaySocket is the portable relay socket, read by a goroutine of its own.
type relaySocket struct{ conn *net.UDPConn }

func (s relaySocket) close() {
	if s.conn != nil {
		s.conn.Close()
	}
}

func (s relaySocket) setDontFragment(bool) error {
	return errors.New("DONT-FRAGMENT is not supported on this platform")
}

func (s relaySocket) send(b []byte, to netip.AddrPort) error {
	_, err := s.conn.WriteToUDPAddrPort(b, to)
	return err
}

// relayIO is the portable relay server: a goroutine per relay socket.
type relayIO struct {
	pool  *relayPool
	stats workerStats
}

func newRelayIO(p *relayPool) (*relayIO, error) { return &relayIO{pool: p}, nil }

func (io *relayIO) workers() int            { return 1 }
func (io *relayIO) foldStats(sum *statsSum) { io.stats.addTo(sum) }
func (io *relayIO) close()                  {}
func (io *relayIO) stop(r *relay)           { r.sock.close(); io.pool.release(r) }
func (io *relayIO) start(r *relay) error    { go io.serve(r); return nil }
func (io *relayIO) bind(addr netip.Addr, port uint16) (relaySocket, error) {
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	pc, err := (&net.ListenConfig{}).ListenPacket(context.Background(), network, netip.AddrPortFrom(addr, port).String())
	if err != nil {
		return relaySocket{}, err
	}
	return relaySocket{conn: pc.(*net.UDPConn)}, nil
}

func (io *relayIO) serve(r *relay) {
	buf := make([]byte, turn.PeerHeadroom+maxPeerPayload+1+turn.PeerTailroom)
	payload := buf[turn.PeerHeadroom : turn.PeerHeadroom+maxPeerPayload+1]
	eng, st := io.pool.srv.engine, &io.stats
	for {
		n, from, err := r.sock.conn.ReadFromUDPAddrPort(payload)
		if err != nil {
			if r.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		st.peerRx.Add(1)
		st.peerRxBytes.Add(uint64(n))
		if n > maxPeerPayload {
			st.drops[turn.DropMalformed].Add(1)
			continue
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		msg, ok := eng.HandlePeer(r.alloc, from, buf, turn.PeerHeadroom, n)
		if !ok {
			st.drops[turn.DropNoPermission].Add(1)
			continue
		}
		switch t := r.alloc.Transport.(type) {
		case *udpListener:
			s := t.socks[int(r.alloc.FiveTuple.Client.Port())%len(t.socks)]
			if _, err := s.conn.WriteToUDPAddrPort(msg, r.alloc.FiveTuple.Client); err == nil {
				t.relayStats[0].tx.Add(1)
				t.relayStats[0].txBytes.Add(uint64(len(msg)))
			}
		case clientWriter:
			t.writeToClient(msg, r.alloc.FiveTuple.Client)
		}
	}
}
