// Package listener runs TURN listeners: TURN-UDP on SO_REUSEPORT sockets
// read in batches, TURN-TCP and TURN-TLS on byte streams, and TURN-DTLS. A
// listener feeds what clients send to the engine (turn.Engine.HandleClient),
// sends replies back, relays Forward results from the allocation's relay
// socket, and takes what relay workers deliver for its clients (it
// implements relay.Client). It owns its sockets and their goroutines;
// package dataplane decides when listeners start, change and stop.
package listener

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/dataplane/udpio"
	"github.com/tern-gw/tern/turn"
)

// Env is what a listener takes from the dataplane that runs it.
type Env struct {
	// Engine handles every client packet.
	Engine *turn.Engine
	// Log gets listener and connection events (nothing per packet).
	Log *slog.Logger
	// UDPThreads is the number of SO_REUSEPORT sockets, each read by a
	// worker of its own, of a TURN-UDP listener (1 where SO_REUSEPORT does
	// not balance).
	UDPThreads int
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF of UDP listener sockets, bytes.
	SocketBuffer int
	// Mode is how UDP workers wait for packets.
	Mode udpio.Mode
	// GSO lets UDP workers send runs of same-size datagrams as one message.
	GSO bool
	// RelayWorkers is the number of relay workers, which count what they
	// deliver to a UDP listener's clients in counters of the listener's.
	RelayWorkers int
	// Conns are the limits of TCP, TLS and DTLS connections when the
	// listener starts; SetConnLimits changes them.
	Conns ConnLimits
	// NoCounters leaves the packet and byte counters of the relay path
	// alone (ternd --packet-counters=false): a UDP worker then adds nothing
	// per batch, and FoldStats reports what requests and drops alone
	// counted. It exists to measure what counting costs.
	NoCounters bool
	// Linger is how long a UDP worker (threads mode) sleeps between polls
	// while datagrams reach its socket closer together than that
	// (internal/sysblock.Linger); 0 wakes it for each.
	Linger time.Duration
}

// ConnLimits bound a TCP, TLS or DTLS listener's connections.
type ConnLimits struct {
	// IdleTimeout is how long a connection that holds no allocation may
	// stay silent after a message. The first message must come within 10 s
	// of connecting (or of the end of the TLS or DTLS handshake), whatever
	// this says.
	IdleTimeout time.Duration
	// AllocatedIdleTimeout is how long a connection that holds an
	// allocation may stay silent; it should outlast the longest allocation
	// lifetime, which the client refreshes before it runs out.
	AllocatedIdleTimeout time.Duration
	// PerIP caps the connections from one client IPv4 address or IPv6 /64;
	// 0 means no cap. A DTLS association counts once its handshake is done.
	PerIP int
	// Max caps the listener's connections; 0 means no cap. A connection
	// accepted at the cap closes the oldest one that holds no allocation,
	// or is itself closed when every connection holds one.
	Max int
}

// ConnStats are a listener's connection counts. A TURN-UDP listener has
// no connections; it reports its sockets, as stunnerd does (each of its
// listener sockets is a "connection" in STUNner's metrics).
type ConnStats struct {
	// Active is the number of open connections (UDP: sockets).
	Active int
	// Accepted counts the connections admitted since the listener started
	// (UDP: sockets opened).
	Accepted uint64
	// RefusedPerIP and RefusedTotal count connections closed at accept:
	// over ConnLimits.PerIP, and at ConnLimits.Max with none to shed.
	RefusedPerIP, RefusedTotal uint64
	// Shed counts connections closed to make room for a new one; Idle
	// those closed for staying silent too long.
	Shed, Idle uint64
}

// Listener is a running TURN listener of any protocol.
type Listener interface {
	// Spec is the config it runs.
	Spec() config.Listener
	// SetSpec and SetAllowlist apply a change that needs no restart
	// (routes and what they allow).
	SetSpec(config.Listener)
	SetAllowlist(*allowlist.List)
	// Close stops it and deletes the allocations made through it.
	Close()
	// FoldStats adds its counters to sum.
	FoldStats(sum *stats.Sum)
	// KeyPair is the PEM certificate and key a TLS or DTLS listener was
	// started with, nil for others.
	KeyPair() (cert, key []byte)
	// LocalAddr is the bound address, for logs.
	LocalAddr() string
	// SetConnLimits applies new connection limits to a TCP, TLS or DTLS
	// listener (a no-op for UDP): open connections stay, and the idle
	// timeouts apply from each connection's next message.
	SetConnLimits(ConnLimits)
	// ConnStats returns the listener's connection counts, and whether it
	// has connections (false for UDP, which reports its sockets).
	ConnStats() (ConnStats, bool)
}

// Start opens the listener lc with the peer allowlist al and starts serving
// it. It returns an error naming the listener: an unknown protocol, an
// address that does not parse, a port in use, a certificate or key that
// cannot be read.
func Start(env Env, lc config.Listener, al *allowlist.List) (Listener, error) {
	switch lc.Protocol {
	case config.ProtoTURNUDP:
		return startUDP(env, lc, al)
	case config.ProtoTURNTCP, config.ProtoTURNTLS:
		return startStream(env, lc, al)
	case config.ProtoTURNDTLS:
		return startDTLS(env, lc, al)
	}
	return nil, fmt.Errorf("listener %q: unknown protocol %q", lc.Name, lc.Protocol)
}

// sendForward sends a Forward result's payload from the allocation's relay
// socket to the peer, one datagram (the connection listeners' path; UDP
// listeners on Linux batch theirs), and counts it in st, and under the
// peer's cluster, when it left and count is set.
func sendForward(st *stats.Worker, res *turn.Result, count bool) {
	if udpio.SendTo(res.Alloc.RelayFor(res.Peer.Addr()).Socket(), res.Payload, res.Peer) == nil && count {
		n := uint64(len(res.Payload))
		st.PeerTx.Add(1)
		st.PeerTxBytes.Add(n)
		c := st.Cluster(res.Cluster)
		c.Tx.Add(1)
		c.TxBytes.Add(n)
	}
}
