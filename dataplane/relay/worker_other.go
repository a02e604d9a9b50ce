//go:build !linux

package relay

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// relaySocket is the portable relay socket, read by a goroutine of its own.
// fd is its descriptor, for listeners that send from it.
type relaySocket struct {
	conn *net.UDPConn
	fd   int
}

func (s relaySocket) close() {
	if s.conn != nil {
		s.conn.Close()
	}
}

func (s relaySocket) setDontFragment(bool) error {
	return errors.New("DONT-FRAGMENT is not supported on this platform")
}

// relayIO is the portable relay server: a goroutine per relay socket.
type relayIO struct {
	pool  *Pool
	stats stats.Worker
}

func newRelayIO(p *Pool) (*relayIO, error) { return &relayIO{pool: p}, nil }

func (io *relayIO) run()                     {}
func (io *relayIO) workers() int             { return 1 }
func (io *relayIO) foldStats(sum *stats.Sum) { io.stats.AddTo(sum) }
func (io *relayIO) close()                   {}
func (io *relayIO) stop(r *Relay)            { r.sock.close(); io.pool.release(r) }
func (io *relayIO) detach(r *Relay)          { io.stop(r) }
func (io *relayIO) start(r *Relay) error {
	r.outFD, r.outStats, r.batch = r.client.BatchSocket(0)
	go io.serve(r)
	return nil
}

func (io *relayIO) bind(addr netip.Addr, port uint16) (relaySocket, error) {
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	pc, err := (&net.ListenConfig{}).ListenPacket(context.Background(), network, netip.AddrPortFrom(addr, port).String())
	if err != nil {
		return relaySocket{}, err
	}
	s := relaySocket{conn: pc.(*net.UDPConn), fd: -1}
	if rc, err := s.conn.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { s.fd = int(fd) })
	}
	return s, nil
}

func (io *relayIO) serve(r *Relay) {
	buf := make([]byte, turn.PeerHeadroom+maxPeerPayload+1+turn.PeerTailroom)
	payload := buf[turn.PeerHeadroom : turn.PeerHeadroom+maxPeerPayload+1]
	eng, st := io.pool.engine, &io.stats
	client := r.alloc.FiveTuple.Client
	for {
		n, from, err := r.sock.conn.ReadFromUDPAddrPort(payload)
		if err != nil {
			if r.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		count := !io.pool.opts.NoCounters
		if count {
			st.PeerRx.Add(1)
			st.PeerRxBytes.Add(uint64(n))
		}
		if n > maxPeerPayload {
			st.Drops[turn.DropMalformed].Add(1)
			continue
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		msg, cluster, ok := eng.HandlePeer(r.alloc, from, buf, turn.PeerHeadroom, n)
		if !ok {
			st.Drops[turn.DropNoPermission].Add(1)
			continue
		}
		if count {
			c := st.Cluster(cluster)
			c.Rx.Add(1)
			c.RxBytes.Add(uint64(n))
		}
		if !r.batch {
			r.client.WriteToClient(msg)
			continue
		}
		if udpio.SendTo(r.outFD, msg, client) == nil && count {
			r.outStats.Tx.Add(1)
			r.outStats.TxBytes.Add(uint64(len(msg)))
		}
	}
}

func (io *relayIO) pause()  {}
func (io *relayIO) resume() {}

func (io *relayIO) adoptSocket(int) (relaySocket, netip.AddrPort, error) {
	return relaySocket{}, netip.AddrPort{}, errors.New("relay: taking over relay sockets needs Linux")
}
