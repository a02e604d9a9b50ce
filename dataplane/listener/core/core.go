// Package core is what every TURN listener transport shares: the
// dataplane's Env, the connection limits and counts, the one delivery
// step (Deliver) that turns the engine's result for a client packet into a
// reply, a forward or a drop and counts it, and the connection base (Base,
// Conn) of the TURN-TCP, TURN-TLS and TURN-DTLS listeners.
//
// It is a leaf below the transports: package listener starts a listener
// by importing its transport (udp, stream, dtls), and each transport
// imports core for Env and the delivery step. Were Env and Deliver in
// package listener itself, the transports and listener would import each
// other.
//
// Lock order. Core has two locks of its own: Base.mu, which guards the
// registry of a listener's connections and the counters of those closed,
// and under which nothing is called but stats reads; and Conn.qmu (below).
// The engine's per-allocation lock and the admission Set's lock are taken
// inside their own calls, never while Base.mu is held. Callbacks that cross packages:
//   - Conn.Handle (a transport's reader) calls the engine, then Deliver
//     and the transport's Sink, whose Reply first tells admission whether
//     the connection now holds an allocation (admission.Set.SetAllocated);
//     a DTLS reader holds its association's lock (dtls package doc) across
//     it, which is safe because none of these takes that lock, and
//     admission takes no other lock under its own.
//   - admission asks whether a connection holds an allocation (the
//     engine's Lookup) with its lock released, and Base.Admit closes the
//     connection it shed (Conn.Abort) after admission returned.
//   - relay workers call Conn.QueueToClient and Conn.FlushToClient holding
//     no lock; on TCP and TLS they take Conn.qmu, a leaf but for the
//     stream transport's outConn lock (and crypto/tls's own) taken under
//     it by the write; on DTLS, the worker's outbox, which is the worker's
//     alone, and RawConn.Control's hold on the listener socket.
//   - Base.CloseAll closes connections with no lock held, so a reader
//     inside Handle can finish its call and see the close.
package core

import (
	"log/slog"
	"time"

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
	// PartialFrameTimeout is how long a TURN-TCP or TURN-TLS connection
	// may take to send the rest of a frame (STUN message or ChannelData)
	// once its first bytes have arrived; 0 takes
	// config.DefaultPartialFrameTimeout. It bounds how long a half-sent
	// frame holds its read buffer (issue 22, item 3).
	PartialFrameTimeout time.Duration
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
	// Frame counts TURN-TCP and TURN-TLS connections closed for a frame
	// not completed within PartialFrameTimeout, or whose read buffer the
	// frame-buffer budget could not hold.
	Frame uint64
	// Unverified counts TURN-DTLS associations closed before their client
	// returned the HelloVerifyRequest's cookie: the oldest, for a new one
	// at the cap of unverified associations, or one past its lifetime.
	Unverified uint64
	// Routed counts the connections of a TURN-TLS listener with an
	// upstream (config.Listener.Upstream) by where their ClientHello sent
	// them; HasUpstream is whether the listener has one now.
	Routed      TLSRouted
	HasUpstream bool
}

// TLSRouted counts a TURN-TLS listener's connections by where their
// ClientHello sent them (config.TLSUpstream).
type TLSRouted struct {
	// TURN counts those served as TURN-TLS, Upstream those spliced to
	// the upstream.
	TURN, Upstream uint64
	// BadHello counts those closed for a ClientHello not whole within
	// the deadline, over the size cap, malformed or cut short.
	BadHello uint64
	// Unreachable counts those for the upstream closed because it could
	// not be reached.
	Unreachable uint64
}

// Limits of connection-oriented transports (TURN-TCP, TURN-TLS, TURN-DTLS).
const (
	// HandshakeTimeout bounds the TLS/DTLS handshake and the wait for the
	// first message, so an idle or stalled client does not hold a slot.
	HandshakeTimeout = 10 * time.Second
)
