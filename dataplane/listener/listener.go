// Package listener runs TURN listeners. A listener feeds what clients send
// to the engine (turn.Engine.HandleClient), sends the result through the
// one delivery step shared by every transport (core.Deliver: a reply, a
// forward from the allocation's relay socket, or a drop, counted), and
// takes what relay workers deliver for its clients (it implements
// relay.Client). It owns its sockets and their goroutines; package
// dataplane decides when listeners start, change and stop.
//
// The packages below it:
//   - core: Env, the delivery step and the connection base, a leaf that
//     the transports import (so that listener, which starts them, is not
//     imported by them);
//   - udp, stream (TURN-TCP and TURN-TLS), dtls: one transport each;
//   - admission: the connection limits of stream and dtls;
//   - certs: the certificate and key pair of stream (TLS) and dtls.
//
// Lock order across them, outermost first: a DTLS association's handling
// lock (dtls), then the engine's per-allocation lock and admission's lock,
// which are never held together; stream's outConn lock, certs' lock and
// core's registry lock are leaves that nothing else is taken under.
// Admission and core close connections only after releasing their locks,
// and no callback crosses a package while its caller holds a lock the
// callee could take: each package's doc says which calls cross.
package listener

import (
	"fmt"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/listener/core"
	"github.com/tern-gw/tern/dataplane/listener/dtls"
	"github.com/tern-gw/tern/dataplane/listener/stream"
	"github.com/tern-gw/tern/dataplane/listener/udp"
	"github.com/tern-gw/tern/dataplane/stats"
)

// Env is what a listener takes from the dataplane that runs it.
type Env = core.Env

// ConnLimits bound a TCP, TLS or DTLS listener's connections.
type ConnLimits = core.ConnLimits

// ConnStats are a listener's connection counts.
type ConnStats = core.ConnStats

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
//
// The transport follows from the protocol's properties in the config's
// protocol table (dataplane/config/protocol): a stream protocol is served
// by package stream (TLS when Secure), a datagram one by udp, or by dtls
// when Secure. A protocol added to that table with a new combination needs a
// transport package here too.
func Start(env Env, lc config.Listener, al *allowlist.List) (Listener, error) {
	info, ok := lc.Protocol.Info()
	switch {
	case !ok:
	case !info.Datagram:
		return wrap(stream.Start(env, lc, al))
	case info.Secure:
		return wrap(dtls.Start(env, lc, al))
	default:
		return wrap(udp.Start(env, lc, al))
	}
	return nil, fmt.Errorf("listener %q: unknown protocol %q", lc.Name, lc.Protocol)
}

// wrap turns a transport's typed result into a Listener, keeping a failed
// start's listener nil rather than a nil pointer in an interface.
func wrap[L Listener](l L, err error) (Listener, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}
