// Package udp is the TURN-UDP listener transport: N sockets bound to one
// address with SO_REUSEPORT, each read by a worker of its own, which runs
// the engine on a batch of datagrams and sends what it produced through
// the listener's one delivery step (core.Deliver) in one sendmmsg. Relay
// workers send to its clients on the same sockets (relay.Client).
//
// It takes no lock: a worker owns its socket, batch and counters, and the
// listener's config and allowlist are atomic pointers. Close waits for the
// workers before closing the sockets, then deletes the listener's
// allocations (turn.Engine.CloseTransport), which closes their relay
// sockets; a relay worker that sends on a listener socket meanwhile gets
// an error, as on any closed socket.
package udp

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/dataplane/stats"
)

// Listener is a TURN-UDP listener: N sockets bound to one address with
// SO_REUSEPORT, each read by its own worker (udp_linux.go). It is the
// turn.Transport and relay.Client of every allocation made through it.
type Listener struct {
	cfg  atomic.Pointer[config.Listener]
	addr netip.AddrPort
	// addr6 is the server address of IPv6 clients' 5-tuples: addr, or for
	// a wildcard listener, which serves both families, [::] at addr's port
	// (addr itself is then 0.0.0.0 for IPv4 clients).
	addr6 netip.AddrPort
	// bound is the address as configured, for LocalAddr.
	bound     netip.AddrPort
	env       core.Env
	socks     []*udpSocket
	allowlist atomic.Pointer[allowlist.List]
	// relayStats[k] counts what relay worker k delivered to this
	// listener's clients, so that no counter is shared between workers.
	relayStats []stats.Worker
	wg         sync.WaitGroup
	closed     atomic.Bool
}

// serverAddr is the server address of the 5-tuple of a client at from:
// the listener's address, in the client's family for a wildcard listener,
// so that an allocation's 5-tuple never mixes families (the offload mirror
// finds the listener's address of the client's family from it).
func (l *Listener) serverAddr(from netip.AddrPort) netip.AddrPort {
	if from.Addr().Is4() {
		return l.addr
	}
	return l.addr6
}

// udpNetwork is the network package net listens on for ip: "udp" (both
// families on one socket) for an unspecified address, else "udp4" or "udp6".
func udpNetwork(ip netip.Addr) string {
	switch {
	case ip.IsUnspecified():
		return "udp"
	case ip.Is6() && !ip.Is4In6():
		return "udp6"
	}
	return "udp4"
}

// PeerCluster implements turn.Transport with the listener's current allowlist.
func (l *Listener) PeerCluster(peer netip.AddrPort) (uint32, bool) {
	return l.allowlist.Load().Cluster(peer)
}

// BatchSocket implements relay.Client: relay worker w sends on socket
// w mod N, so the workers spread over the listener's sockets.
func (l *Listener) BatchSocket(w int) (int, *stats.Worker, bool) {
	return l.socks[w%len(l.socks)].fd, &l.relayStats[w%len(l.relayStats)], true
}

// WriteToClient implements relay.Client; relay workers batch on
// BatchSocket's socket instead, so it is never called.
func (l *Listener) WriteToClient([]byte) {}

// QueueToClient and FlushToClient implement relay.Client; like
// WriteToClient they are never called.
func (l *Listener) QueueToClient(int, []byte) bool { return false }
func (l *Listener) FlushToClient(int)              {}

func (l *Listener) Spec() config.Listener           { return *l.cfg.Load() }
func (l *Listener) SetSpec(lc config.Listener)      { l.cfg.Store(&lc) }
func (l *Listener) SetAllowlist(al *allowlist.List) { l.allowlist.Store(al) }
func (l *Listener) LocalAddr() string               { return l.bound.String() }
func (l *Listener) KeyPair() (cert, key []byte)     { return nil, nil }
func (l *Listener) SetConnLimits(core.ConnLimits)   {}
func (l *Listener) ConnStats() (core.ConnStats, bool) {
	return core.ConnStats{Active: len(l.socks), Accepted: uint64(len(l.socks))}, false
}

func (l *Listener) FoldStats(sum *stats.Sum) {
	for _, s := range l.socks {
		s.stats.AddTo(sum)
	}
	for i := range l.relayStats {
		l.relayStats[i].AddTo(sum)
	}
}

// Start binds env.UDPThreads sockets for lc, serving clients that may reach
// the peers of al, and starts their workers. Its errors name the listener:
// an address that does not parse, a port in use.
func Start(env core.Env, lc config.Listener, al *allowlist.List) (*Listener, error) {
	ip, err := netip.ParseAddr(lc.Address)
	if err != nil {
		return nil, fmt.Errorf("listener %q: address: %w", lc.Name, err)
	}
	threads := env.UDPThreads
	if !reusePortBalances || threads < 1 {
		threads = 1
	}
	ip = ip.Unmap()
	l := &Listener{addr: netip.AddrPortFrom(ip, uint16(lc.Port)), env: env}
	l.addr6, l.bound = l.addr, l.addr
	if ip.IsUnspecified() {
		l.addr = netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(lc.Port))
		l.addr6 = netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(lc.Port))
	}
	l.cfg.Store(&lc)
	l.relayStats = make([]stats.Worker, max(env.RelayWorkers, 1))
	l.allowlist.Store(al)
	for range threads {
		sock, err := openUDPSocket(l.addr, env.SocketBuffer, env.Mode)
		if err != nil {
			l.closeSockets()
			return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
		}
		sock.l = l
		l.socks = append(l.socks, sock)
	}
	env.Log.Debug("udp listener sockets", "name", lc.Name, "threads", len(l.socks))
	for _, sock := range l.socks {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			sock.serve()
		}()
	}
	return l, nil
}

// Close stops the workers, closes the sockets and deletes the allocations
// made through the listener.
func (l *Listener) Close() {
	l.closeSockets()
	l.env.Engine.CloseTransport(l, "listener stopped")
}

func (l *Listener) closeSockets() {
	l.closed.Store(true)
	for _, s := range l.socks {
		s.shutdown()
	}
	l.wg.Wait()
	for _, s := range l.socks {
		s.close()
	}
}
