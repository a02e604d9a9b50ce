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
	"github.com/tern-gw/tern/internal/pausegate"
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
	bound netip.AddrPort
	// wild is set for a listener on a wildcard address (0.0.0.0 or ::): its
	// sockets learn each datagram's destination address, which becomes the
	// server address of the client's 5-tuple and the source of everything
	// sent to the client (udpio.SetPacketInfo says why).
	wild      bool
	env       core.Env
	socks     []*udpSocket
	allowlist atomic.Pointer[allowlist.List]
	// relayStats[k] counts what relay worker k delivered to this
	// listener's clients, so that no counter is shared between workers.
	relayStats []stats.Worker
	wg         sync.WaitGroup
	closed     atomic.Bool
	// gate parks the workers while a hand-over holds them (Pause).
	gate pausegate.Gate
	// adopted is set for a listener made of another process's sockets
	// (Adopt) until Resume starts its workers.
	adopted bool
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

// FromDestination implements relay.DestinationSource: on a wildcard
// listener, relay workers send to a client from the server address of its
// 5-tuple, the address it sent its Allocate to.
func (l *Listener) FromDestination() bool { return l.wild }

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
// an address that does not parse, a port in use, including one that
// another process bound with SO_REUSEPORT (unshared: sharing it would
// split clients between the two).
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
		l.wild = true
	}
	l.cfg.Store(&lc)
	l.relayStats = make([]stats.Worker, max(env.RelayWorkers, 1))
	l.allowlist.Store(al)
	if err := unshared(l.addr); err != nil {
		return nil, fmt.Errorf("listener %q: %w", lc.Name, err)
	}
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
	l.startWorkers()
	return l, nil
}

func (l *Listener) startWorkers() {
	for _, sock := range l.socks {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			sock.serve()
		}()
	}
}

// Sockets returns the descriptors of the listener's sockets, for a
// hand-over to a successor process (dataplane/takeover).
func (l *Listener) Sockets() []int {
	fds := make([]int, len(l.socks))
	for i, s := range l.socks {
		fds[i] = s.fd
	}
	return fds
}

// Pause stops the workers reading, without closing or shutting down the
// sockets, and returns once all have stopped: datagrams then wait in the
// sockets' kernel buffers. In threads mode a worker blocked in recvmmsg
// notices within its receive timeout (1 s).
func (l *Listener) Pause() {
	if !canHandOver || l.adopted {
		return
	}
	l.gate.Pause(len(l.socks), func() {
		for _, s := range l.socks {
			s.wakeForPause()
		}
	})
}

// Resume starts the workers of an adopted listener, or lets those of a
// paused one read again. It first sets the sockets' blocking mode for this
// process's I/O mode, which a successor that did not take over may have
// changed.
func (l *Listener) Resume() {
	for _, s := range l.socks {
		s.resumeMode(l.env.Mode)
	}
	if l.adopted {
		l.adopted = false
		l.startWorkers()
		return
	}
	l.gate.Resume()
}

// Adopt makes a listener for lc of the sockets fds that another ternd
// bound for it and handed over, serving clients that may reach the peers
// of al. It reads nothing until Resume. In poller mode the descriptors in
// fds are replaced by duplicates registered with the netpoller (and
// closed). It returns an error naming the listener when a descriptor is not a
// UDP socket bound to lc's address; fds are then left open.
func Adopt(env core.Env, lc config.Listener, al *allowlist.List, fds []int) (*Listener, error) {
	ip, err := netip.ParseAddr(lc.Address)
	if err != nil {
		return nil, fmt.Errorf("listener %q: address: %w", lc.Name, err)
	}
	if len(fds) == 0 {
		return nil, fmt.Errorf("listener %q: no sockets handed over", lc.Name)
	}
	ip = ip.Unmap()
	l := &Listener{addr: netip.AddrPortFrom(ip, uint16(lc.Port)), env: env, adopted: true}
	l.addr6, l.bound = l.addr, l.addr
	if ip.IsUnspecified() {
		l.addr = netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(lc.Port))
		l.addr6 = netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(lc.Port))
		l.wild = true
	}
	l.cfg.Store(&lc)
	l.relayStats = make([]stats.Worker, max(env.RelayWorkers, 1))
	l.allowlist.Store(al)
	for _, fd := range fds {
		sock, err := adoptUDPSocket(fd, l.bound)
		if err != nil {
			return nil, fmt.Errorf("listener %q: handed-over socket: %w", lc.Name, err)
		}
		sock.l = l
		// Readied for this process's I/O mode now, not at Resume: in
		// poller mode that gives the socket another descriptor, which
		// relays adopted next must already send on. The process that
		// handed it over sets its own mode again if it resumes.
		sock.resumeMode(env.Mode)
		l.socks = append(l.socks, sock)
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
	if l.adopted {
		l.adopted = false
		l.Resume()
	}
	l.gate.Resume()
	for _, s := range l.socks {
		s.shutdown()
	}
	l.wg.Wait()
	for _, s := range l.socks {
		s.close()
	}
}
