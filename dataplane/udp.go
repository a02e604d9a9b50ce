package dataplane

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/turn"
)

// clientWriter is implemented by transports that relay workers write
// peer data to one packet at a time (stream transports). UDP listeners are
// written to in batches instead.
type clientWriter interface {
	writeToClient(b []byte, to netip.AddrPort)
}

// udpListener is a TURN-UDP listener: N sockets bound to one address with
// SO_REUSEPORT, each read by its own worker (udp_linux.go). It is the
// turn.Transport of every allocation made through it.
type udpListener struct {
	cfg    config.Listener
	addr   netip.AddrPort
	srv    *Server
	socks  []*udpSocket
	policy atomic.Pointer[policy]
	// relayStats[k] counts what relay worker k delivered to this
	// listener's clients, so that no counter is shared between workers.
	relayStats []workerStats
	wg         sync.WaitGroup
	closed     atomic.Bool
}

// PeerAllowed implements turn.Transport with the listener's current allowlist.
func (l *udpListener) PeerAllowed(peer netip.AddrPort) bool { return l.policy.Load().allowed(peer) }

func (l *udpListener) spec() config.Listener       { return l.cfg }
func (l *udpListener) setSpec(lc config.Listener)  { l.cfg = lc }
func (l *udpListener) setPolicy(p *policy)         { l.policy.Store(p) }
func (l *udpListener) localAddr() string           { return l.addr.String() }
func (l *udpListener) keyPair() (cert, key []byte) { return nil, nil }

func (l *udpListener) foldStats(sum *statsSum) {
	for _, s := range l.socks {
		s.stats.addTo(sum)
	}
	for i := range l.relayStats {
		l.relayStats[i].addTo(sum)
	}
}

// startUDP binds threads sockets for lc and starts their workers.
func (s *Server) startUDP(lc config.Listener, pol *policy, threads int) (*udpListener, error) {
	ip, err := netip.ParseAddr(lc.Address)
	if err != nil {
		return nil, fmt.Errorf("listener %q: address: %w", lc.Name, err)
	}
	if !reusePortSupported || threads < 1 {
		threads = 1
	}
	l := &udpListener{cfg: lc, addr: netip.AddrPortFrom(ip, uint16(lc.Port)), srv: s}
	l.relayStats = make([]workerStats, s.relays.io.workers())
	l.policy.Store(pol)
	for range threads {
		sock, err := openUDPSocket(l.addr, s.opts.SocketBuffer, s.opts.IOMode)
		if err != nil {
			l.closeSockets()
			return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
		}
		sock.l = l
		l.socks = append(l.socks, sock)
	}
	s.log.Debug("udp listener sockets", "name", lc.Name, "threads", len(l.socks))
	for _, sock := range l.socks {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			sock.serve()
		}()
	}
	return l, nil
}

// close stops the workers, closes the sockets and deletes the allocations
// made through the listener.
func (l *udpListener) close() {
	l.closeSockets()
	l.srv.engine.CloseTransport(l, "listener stopped")
}

func (l *udpListener) closeSockets() {
	l.closed.Store(true)
	for _, s := range l.socks {
		s.shutdown()
	}
	l.wg.Wait()
	for _, s := range l.socks {
		s.close()
	}
}

// forward returns the relay of a Forward result.
func forwardRelay(res *turn.Result) *relay {
	r, _ := res.Alloc.Relay().(*relay)
	return r
}
