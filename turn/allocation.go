package turn

import (
	"net/netip"
	"sync"
	"sync/atomic"
)

// Proto is a client transport protocol, the last element of a 5-tuple.
type Proto uint8

// Client transports of RFC 8656 §3.1.
const (
	ProtoUDP Proto = iota + 1
	ProtoTCP
	ProtoTLS
	ProtoDTLS
)

// String returns the protocol's name.
func (p Proto) String() string {
	switch p {
	case ProtoUDP:
		return "udp"
	case ProtoTCP:
		return "tcp"
	case ProtoTLS:
		return "tls"
	case ProtoDTLS:
		return "dtls"
	}
	return "unknown"
}

// stream reports whether the transport is a byte stream, where ChannelData
// must be padded to 4 bytes (RFC 8656 §12.5).
func (p Proto) stream() bool { return p == ProtoTCP || p == ProtoTLS }

// FiveTuple identifies a client's transport connection to the server (RFC
// 8656 §2): client address, server (listener) address and protocol. It is the
// key of the allocation table.
type FiveTuple struct {
	Client netip.AddrPort
	Server netip.AddrPort
	Proto  Proto
}

// String renders the 5-tuple for logs, e.g. "udp:127.0.0.1:50000->127.0.0.1:3478".
func (f FiveTuple) String() string {
	return f.Proto.String() + ":" + f.Client.String() + "->" + f.Server.String()
}

// Transport is what a client's packets arrive on and replies leave by: a UDP
// listener or a TCP/TLS/DTLS connection. The dataplane owns it; the engine
// keeps it in the allocation so that HandlePeer's caller knows where to send.
type Transport interface {
	// PeerAllowed reports whether clients of this transport's listener may
	// reach peer: the allowlist of the listener's routes. It is called on
	// CreatePermission, ChannelBind and every Send indication, so it must not
	// allocate or block.
	PeerAllowed(peer netip.AddrPort) bool
}

// Relay is a relayed transport address: a UDP socket the dataplane opened
// for one allocation.
type Relay interface {
	// Addr is the relayed transport address given to the client in
	// XOR-RELAYED-ADDRESS.
	Addr() netip.AddrPort
	// Close releases the socket. The engine calls it once, when the
	// allocation is deleted or expires.
	Close() error
	// Socket is the relay socket's descriptor. The engine never uses it:
	// it is there so that the dataplane's listeners send a Forward result's
	// payload from Result.Alloc.Relay() without a type assertion.
	Socket() int
}

type permission struct {
	peer    netip.Addr
	expires atomic.Int64 // unix ns
}

type channel struct {
	number  uint16
	peer    netip.AddrPort
	expires atomic.Int64 // unix ns
}

// Allocation is one client's allocation (RFC 8656 §2.2): a relayed transport
// address bound to the client's 5-tuple, with its permissions and channels.
// Its exported fields are set at creation and never change.
type Allocation struct {
	// FiveTuple is the client's 5-tuple.
	FiveTuple FiveTuple
	// Transport is where packets for the client are written.
	Transport Transport
	// Username is the USERNAME that created the allocation; later requests
	// must carry the same one (441 otherwise).
	Username string

	relay   Relay
	key     tupleKey     // FiveTuple packed for the table; set by table.insert
	expires atomic.Int64 // unix ns
	deleted atomic.Bool

	// Copy-on-write sets: readers load the pointer, writers (under mu) build
	// a new slice and store it. Lifetimes are refreshed in place.
	perms atomic.Pointer[[]*permission]
	chans atomic.Pointer[[]*channel]

	mu       sync.Mutex // serializes writers of this allocation
	lastTxID [12]byte   // Allocate transaction that created it, for retransmissions
	token    uint64     // RESERVATION-TOKEN that Allocate returned, 0 if none
}

// Relay returns the allocation's relay socket.
func (a *Allocation) Relay() Relay { return a.relay }

// RelayAddr returns the relayed transport address.
func (a *Allocation) RelayAddr() netip.AddrPort { return a.relay.Addr() }

// Expires returns the allocation's expiry as unix nanoseconds.
func (a *Allocation) Expires() int64 { return a.expires.Load() }

// Deleted reports whether the allocation has been deleted; a relay reader
// that still holds it drops what it reads.
func (a *Allocation) Deleted() bool { return a.deleted.Load() }

// hasPermission reports whether a live permission exists for the peer's IP.
func (a *Allocation) hasPermission(peer netip.Addr, now int64) bool {
	ps := a.perms.Load()
	if ps == nil {
		return false
	}
	for _, p := range *ps {
		if p.peer == peer {
			return p.expires.Load() > now
		}
	}
	return false
}

// channelByNumber returns the live channel with number n, or nil.
func (a *Allocation) channelByNumber(n uint16, now int64) *channel {
	cs := a.chans.Load()
	if cs == nil {
		return nil
	}
	for _, c := range *cs {
		if c.number == n {
			if c.expires.Load() > now {
				return c
			}
			return nil
		}
	}
	return nil
}

// channelByPeer returns the live channel bound to peer, or nil.
func (a *Allocation) channelByPeer(peer netip.AddrPort, now int64) *channel {
	cs := a.chans.Load()
	if cs == nil {
		return nil
	}
	for _, c := range *cs {
		if c.peer == peer {
			if c.expires.Load() > now {
				return c
			}
			return nil
		}
	}
	return nil
}

// addPermission installs or refreshes the permission for peer until expires.
// The caller holds a.mu.
func (a *Allocation) addPermission(peer netip.Addr, expires int64) {
	old := a.perms.Load()
	if old != nil {
		for _, p := range *old {
			if p.peer == peer {
				p.expires.Store(expires)
				return
			}
		}
	}
	p := &permission{peer: peer}
	p.expires.Store(expires)
	var next []*permission
	if old != nil {
		next = make([]*permission, 0, len(*old)+1)
		next = append(next, *old...)
	}
	next = append(next, p)
	a.perms.Store(&next)
}

// bindChannel binds number to peer or refreshes the binding, following RFC
// 8656 §11.2: a number bound to another peer, or a peer bound to another
// number, is a 400. The caller holds a.mu.
func (a *Allocation) bindChannel(number uint16, peer netip.AddrPort, now, expires int64) bool {
	old := a.chans.Load()
	if old != nil {
		for _, c := range *old {
			live := c.expires.Load() > now
			switch {
			case c.number == number && c.peer == peer:
				c.expires.Store(expires)
				return true
			case live && (c.number == number || c.peer == peer):
				return false
			}
		}
	}
	c := &channel{number: number, peer: peer}
	c.expires.Store(expires)
	next := make([]*channel, 0, 4)
	if old != nil {
		// Drop expired bindings that collide with the new one so that a
		// number or peer is free again once its binding has expired.
		for _, o := range *old {
			if o.number != number && o.peer != peer {
				next = append(next, o)
			}
		}
	}
	next = append(next, c)
	a.chans.Store(&next)
	return true
}

// prune drops expired permissions and channels. The caller holds a.mu.
func (a *Allocation) prune(now int64) {
	if old := a.perms.Load(); old != nil {
		keep := make([]*permission, 0, len(*old))
		for _, p := range *old {
			if p.expires.Load() > now {
				keep = append(keep, p)
			}
		}
		if len(keep) != len(*old) {
			a.perms.Store(&keep)
		}
	}
	if old := a.chans.Load(); old != nil {
		keep := make([]*channel, 0, len(*old))
		for _, c := range *old {
			if c.expires.Load() > now {
				keep = append(keep, c)
			}
		}
		if len(keep) != len(*old) {
			a.chans.Store(&keep)
		}
	}
}

// revoke drops permissions and channels whose peer the transport no longer
// allows (after a route change). The caller holds a.mu.
func (a *Allocation) revoke(allowed func(netip.AddrPort) bool) {
	if old := a.chans.Load(); old != nil {
		keep := make([]*channel, 0, len(*old))
		for _, c := range *old {
			if allowed(c.peer) {
				keep = append(keep, c)
			}
		}
		if len(keep) != len(*old) {
			a.chans.Store(&keep)
		}
	}
	if old := a.perms.Load(); old != nil {
		keep := make([]*permission, 0, len(*old))
		for _, p := range *old {
			// A permission is per IP; port 0 asks "any port of this IP".
			if allowed(netip.AddrPortFrom(p.peer, 0)) {
				keep = append(keep, p)
			}
		}
		if len(keep) != len(*old) {
			a.perms.Store(&keep)
		}
	}
}
