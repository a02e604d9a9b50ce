package core

import (
	"net/netip"

	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/turn"
)

// Sink is where a transport sends what the engine decided about a client
// packet. Implementations must not allocate: Deliver calls them once per
// packet.
type Sink interface {
	// Reply sends msg (a STUN response, RFC 8489 §6.3) to the client at
	// client, on the transport it came from; an error means it did not
	// leave, and on a connection that the connection is broken.
	Reply(msg []byte, client netip.AddrPort) error
	// Forward sends p from the relay socket fd to peer, as one datagram
	// (now, or in the transport's batch). An error means it did not leave;
	// UDP may lose it, so it only goes uncounted.
	Forward(fd int, p []byte, peer netip.AddrPort) error
}

// Counts are what Deliver and the transport's reader counted since the
// last Flush, so that a batch of packets costs one atomic add per counter
// rather than one per packet. The zero value is empty.
type Counts struct {
	rx, rxBytes, tx, txBytes, peerTx, peerTxBytes uint64
	run                                           stats.ClusterRun
}

// Received counts a packet of n bytes from a client.
func (n *Counts) Received(size int) {
	n.rx++
	n.rxBytes += uint64(size)
}

// Flush adds the counts to st and empties them; with off (Env.NoCounters)
// it drops them.
func (n *Counts) Flush(st *stats.Worker, off bool) {
	if !off {
		if n.rx > 0 {
			st.Rx.Add(n.rx)
			st.RxBytes.Add(n.rxBytes)
		}
		if n.peerTx > 0 {
			st.PeerTx.Add(n.peerTx)
			st.PeerTxBytes.Add(n.peerTxBytes)
			n.run.FlushTx(st)
		}
		if n.tx > 0 {
			st.Tx.Add(n.tx)
			st.TxBytes.Add(n.txBytes)
		}
	}
	*n = Counts{}
}

// Deliver is the one step from the engine's result for a client packet
// (turn.Engine.HandleClient) to the wire, used by every transport:
//   - turn.Reply: the reply goes to client through sink.Reply and is
//     counted as sent to the client (tx) once it left;
//   - turn.Forward: the payload goes from the allocation's relay socket of
//     the peer's family (turn.Allocation.RelayFor) to the peer through
//     sink.Forward and is counted as sent to the peer (peer tx), and under
//     the peer's cluster (turn.Result.Cluster), once it left;
//   - otherwise the packet is dropped and counted in st's Drops under
//     res.Drop at once (drops are counted even with Env.NoCounters).
//
// Sent packets are counted in n, for the caller to Flush into st. The
// error is sink.Reply's: a connection transport closes the connection on
// it.
func Deliver(res *turn.Result, client netip.AddrPort, sink Sink, st *stats.Worker, n *Counts) error {
	switch res.Kind {
	case turn.Reply:
		if err := sink.Reply(res.Reply, client); err != nil {
			return err
		}
		n.tx++
		n.txBytes += uint64(len(res.Reply))
	case turn.Forward:
		if sink.Forward(res.Alloc.RelayFor(res.Peer.Addr()).Socket(), res.Payload, res.Peer) == nil {
			n.peerTx++
			n.peerTxBytes += uint64(len(res.Payload))
			n.run.Tx(st, res.Cluster, len(res.Payload))
		}
	default:
		st.Drops[res.Drop].Add(1)
	}
	return nil
}
