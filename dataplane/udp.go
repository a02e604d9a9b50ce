package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/turn"
)

// maxClientPacket is the read buffer of a listener worker, in bytes: the
// largest UDP datagram.
const maxClientPacket = 65535

// clientWriter is implemented by transports that relay workers write
// peer data to.
type clientWriter interface {
	writeToClient(b []byte, to netip.AddrPort)
}

// udpListener is a TURN-UDP listener: N sockets bound to one address with
// SO_REUSEPORT, each read by its own worker. It is the turn.Transport of
// every allocation made through it.
type udpListener struct {
	cfg    config.Listener
	addr   netip.AddrPort
	srv    *Server
	socks  []*net.UDPConn
	policy atomic.Pointer[policy]
	stats  listenerStats
	wg     sync.WaitGroup
	closed atomic.Bool
}

// PeerAllowed implements turn.Transport with the listener's current allowlist.
func (l *udpListener) PeerAllowed(peer netip.AddrPort) bool { return l.policy.Load().allowed(peer) }

// writeToClient sends peer data to a client. Any of the listener's sockets
// will do, as they share the address; hashing on the client port spreads
// the send-side socket locks.
func (l *udpListener) writeToClient(b []byte, to netip.AddrPort) {
	s := l.socks[int(to.Port())%len(l.socks)]
	if _, err := s.WriteToUDPAddrPort(b, to); err == nil {
		l.stats.tx.Add(1)
		l.stats.txBytes.Add(uint64(len(b)))
	}
}

// startUDP binds threads sockets for lc and starts their workers.
func (s *Server) startUDP(lc config.Listener, pol *policy, threads int) (*udpListener, error) {
	ip, err := netip.ParseAddr(lc.Address)
	if err != nil {
		return nil, fmt.Errorf("listener %q: address: %w", lc.Name, err)
	}
	addr := netip.AddrPortFrom(ip, uint16(lc.Port))
	network := "udp4"
	if ip.Is6() {
		network = "udp6"
	}
	if !reusePortSupported || threads < 1 {
		threads = 1
	}
	l := &udpListener{cfg: lc, addr: addr, srv: s}
	l.policy.Store(pol)
	lconf := net.ListenConfig{Control: controlReusePort}
	for range threads {
		pc, err := lconf.ListenPacket(context.Background(), network, addr.String())
		if err != nil {
			l.close()
			return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
		}
		c := pc.(*net.UDPConn)
		if s.opts.SocketBuffer > 0 {
			_ = c.SetReadBuffer(s.opts.SocketBuffer)
			_ = c.SetWriteBuffer(s.opts.SocketBuffer)
		}
		l.socks = append(l.socks, c)
	}
	for _, c := range l.socks {
		l.wg.Add(1)
		go l.serve(c)
	}
	return l, nil
}

// serve is one listener worker: read a datagram, run the engine, write what
// it says. Nothing here allocates per packet.
func (l *udpListener) serve(c *net.UDPConn) {
	defer l.wg.Done()
	buf := make([]byte, maxClientPacket)
	var res turn.Result
	eng, st := l.srv.engine, l.srv.stats
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if l.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		l.stats.rx.Add(1)
		l.stats.rxBytes.Add(uint64(n))
		ft := turn.FiveTuple{Client: netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), Server: l.addr, Proto: turn.ProtoUDP}
		eng.HandleClient(l, ft, buf[:n], &res)
		switch res.Kind {
		case turn.Reply:
			if _, err := c.WriteToUDPAddrPort(res.Reply, from); err == nil {
				l.stats.tx.Add(1)
				l.stats.txBytes.Add(uint64(len(res.Reply)))
			}
		case turn.Forward:
			if r, ok := res.Alloc.Relay().(*relay); ok && r.send(res.Payload, res.Peer) == nil {
				st.peerTx.Add(1)
				st.peerTxBytes.Add(uint64(len(res.Payload)))
			}
		default:
			st.drops[res.Drop].Add(1)
		}
	}
}

// close stops the workers; allocations made through the listener are
// deleted by the caller.
func (l *udpListener) close() {
	l.closed.Store(true)
	for _, c := range l.socks {
		c.Close()
	}
	l.wg.Wait()
}
