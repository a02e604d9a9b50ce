package turn

import "net/netip"

// PathEvent describes one channel binding of a plain TURN-UDP allocation
// that a relay outside the engine (the dataplane's kernel offload) may
// carry in both directions: ChannelData from FiveTuple.Client to
// FiveTuple.Server on Channel goes to Peer from Relay, and datagrams from
// Peer to Relay go back on Channel (RFC 8656 §12).
type PathEvent struct {
	// FiveTuple is the allocation's 5-tuple; its Proto is always ProtoUDP.
	FiveTuple FiveTuple
	// Transport is the allocation's transport (the UDP listener).
	Transport Transport
	// Relay is the relayed transport address.
	Relay netip.AddrPort
	// Peer is the peer the channel is bound to.
	Peer netip.AddrPort
	// Channel is the channel number.
	Channel uint16
	// Expires is the earliest of the channel binding's, the peer
	// permission's and the allocation's expiry, in unix nanoseconds of the
	// engine's Clock. The engine refuses the path's packets from then on.
	Expires int64
	// Cluster is Transport.PeerCluster's number for Peer, which the
	// engine reports with every packet it relays on the channel.
	Cluster uint32
}

// PathObserver hears when channel bindings of plain TURN-UDP allocations
// become relayable and stop being so, so that the dataplane can mirror them
// into a kernel fast path that never relays what the engine would refuse.
// Allocations over TCP, TLS and DTLS are never reported: their ChannelData
// is framed in a stream or encrypted.
//
// PathUp reports a path that is relayable until ev.Expires: a ChannelBind
// that made or refreshed it, a CreatePermission or Refresh that moved its
// expiry, a route change that filed its peer under another cluster. It is
// called again for the same (allocation, channel) whenever Expires or
// Cluster changes; the last call wins. PathDown reports that the path must
// not be relayed any more: the binding, its peer's permission or the
// allocation expired (Engine.Sweep), the allocation was deleted (Refresh
// with lifetime 0, CloseTransport, Close) or a route change removed the
// peer from the allowlist (Engine.Revalidate). ev is the path as last
// reported by PathUp.
//
// Both are called with the allocation's lock held, so for one allocation
// they are serialized and a PathDown is never followed by a stale PathUp;
// they may block briefly (a map update) but must not call back into the
// Engine. Paths of different allocations are reported concurrently.
type PathObserver interface {
	PathUp(ev PathEvent)
	PathDown(ev PathEvent)
}

// pathEvent describes c as it was last reported. The caller holds a.mu.
func (a *Allocation) pathEvent(c *channel) PathEvent {
	return PathEvent{
		FiveTuple: a.FiveTuple,
		Transport: a.Transport,
		Relay:     a.RelayFor(c.peer.Addr()).Addr(),
		Peer:      c.peer,
		Channel:   c.number,
		Expires:   c.shown,
		Cluster:   c.shownCluster,
	}
}

// pathOf returns the instant until which channel c is relayable, and
// whether it is now: it needs the allocation, the binding and a permission
// for the peer's IP, all live. The caller holds a.mu.
func (a *Allocation) pathOf(c *channel, now int64) (int64, bool) {
	if a.deleted.Load() {
		return 0, false
	}
	p := a.perms.get(keyOfAddr(c.peer.Addr(), 0))
	if p == nil {
		return 0, false
	}
	exp := min(c.expires.Load(), p.expires.Load(), a.expires.Load())
	return exp, exp > now
}

// syncPath reports c to the observer if its relayability, expiry or
// cluster changed since it was last reported. The caller holds a.mu and
// has checked a.obs.
func (a *Allocation) syncPath(c *channel, now int64) {
	exp, ok := a.pathOf(c, now)
	if !ok {
		a.pathDown(c)
		return
	}
	cl := c.cluster.Load()
	if c.shown == exp && c.shownCluster == cl {
		return
	}
	c.shown, c.shownCluster = exp, cl
	a.obs.PathUp(a.pathEvent(c))
}

// syncPaths runs syncPath over every channel. The caller holds a.mu and
// has checked a.obs.
func (a *Allocation) syncPaths(now int64) {
	a.byPeer.each(func(c *channel) { a.syncPath(c, now) })
}

// pathDown reports c's path gone if it was reported up. The caller holds
// a.mu and has checked a.obs.
func (a *Allocation) pathDown(c *channel) {
	if c.shown == 0 {
		return
	}
	ev := a.pathEvent(c)
	c.shown, c.shownCluster = 0, 0
	a.obs.PathDown(ev)
}
