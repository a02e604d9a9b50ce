package turn

import (
	"net/netip"

	"github.com/pion/stun/v2"
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
	// PeerCluster reports whether clients of this transport's listener may
	// reach peer (the allowlist of the listener's routes) and, when they
	// may, a cluster number of the transport's choosing: the dataplane
	// passes the ID of the cluster that admits the peer, 0 for none. The
	// engine keeps the number with the permission or channel it installs
	// and hands it back with every packet relayed to or from the peer
	// (Result.Cluster, HandlePeer), so that traffic is counted per cluster
	// without a lookup per packet. It is called on CreatePermission (with
	// port 0: any port of the IP), ChannelBind, every Send indication and
	// Revalidate, so it must not allocate or block.
	PeerCluster(peer netip.AddrPort) (cluster uint32, ok bool)
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
	// payload from Result.Alloc.RelayFor(peer) without a type assertion.
	Socket() int
}

type permission struct {
	peer    netip.Addr
	key     peerKey      // peer with port 0
	expires atomic.Int64 // unix ns
	// cluster is Transport.PeerCluster's number for the IP, updated when
	// the permission is refreshed or revalidated.
	cluster atomic.Uint32
}

func (p *permission) peerKey() peerKey { return p.key }

type channel struct {
	number  uint16
	peer    netip.AddrPort
	key     peerKey
	expires atomic.Int64 // unix ns
	// cluster is Transport.PeerCluster's number for peer.
	cluster atomic.Uint32
	// perm is the permission of the peer's IP when the channel was last
	// bound or refreshed, so that relaying on the channel checks it with
	// two loads instead of a lookup. A removed permission has expires 0,
	// so a stale pointer sends permitted to the index.
	perm atomic.Pointer[permission]
	// shown and shownCluster are the expiry and cluster last reported to
	// the PathObserver, shown 0 when the path is not reported up. Under
	// the allocation's mu.
	shown        int64
	shownCluster uint32
}

func (c *channel) peerKey() peerKey { return c.key }

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

	// relay is the first relayed transport address (the family the
	// client asked for, or the default); relays holds it and, for an
	// allocation made with ADDITIONAL-ADDRESS-FAMILY, the IPv6 one, by
	// family (relays[0] IPv4, relays[1] IPv6; nil for a family it lacks).
	relay   Relay
	relays  [2]Relay
	key     tupleKey     // FiveTuple packed for the table; set by table.insert
	expires atomic.Int64 // unix ns
	deleted atomic.Bool

	// Permissions by peer IP, channels by peer address and by number: see
	// index and chanNumbers. Readers take no lock; writers hold mu.
	// Lifetimes are refreshed in place.
	perms  index[permission, *permission]
	byPeer index[channel, *channel]
	nums   atomic.Pointer[chanNumbers] // made at the first ChannelBind

	mu sync.Mutex // serializes writers of this allocation
	// obs hears this allocation's channel paths: the engine's
	// PathObserver for a plain TURN-UDP allocation, nil otherwise.
	obs      PathObserver
	lastTxID [12]byte // Allocate transaction that created it, for retransmissions
	token    uint64   // RESERVATION-TOKEN that Allocate returned, 0 if none
	// extraErr is the ADDRESS-ERROR-CODE of a dual allocation whose IPv6
	// relay could not be opened (RFC 8656 §7.2), 0 otherwise.
	extraErr stun.ErrorCode
	// state is the engine's budget, charged for the allocation and each
	// permission, channel and channel number page it holds; charged is
	// what it holds now, given back when it is deleted. Under mu.
	state   *stateBudget
	charged int64
}

// Relay returns the allocation's first relay socket: the one of the
// family the client asked for (RFC 8656 §7.2), or the default.
func (a *Allocation) Relay() Relay { return a.relay }

// RelayFor returns the relay socket that reaches peer: the allocation's
// relayed transport address of the peer's family (an IPv4-mapped IPv6
// address counts as IPv4), or nil when the allocation has none of that
// family. A dual allocation (ADDITIONAL-ADDRESS-FAMILY, RFC 8656 §7.2) has
// one of each. It allocates nothing: listeners call it per relayed packet.
func (a *Allocation) RelayFor(peer netip.Addr) Relay { return a.relays[familyIndex(peer)] }

// Relays returns the allocation's relay sockets: the first, then the
// additional one of a dual allocation, if any.
func (a *Allocation) Relays() []Relay {
	out := []Relay{a.relay}
	for _, r := range a.relays {
		if r != nil && r != a.relay {
			out = append(out, r)
		}
	}
	return out
}

// RelayAddr returns the first relayed transport address.
func (a *Allocation) RelayAddr() netip.AddrPort { return a.relay.Addr() }

// familyIndex is 0 for an IPv4 (or IPv4-mapped) address, 1 for IPv6.
func familyIndex(ip netip.Addr) int {
	if ip.Is4() || ip.Is4In6() {
		return 0
	}
	return 1
}

// setRelays records the allocation's relay sockets: first, and extra (nil
// unless the allocation is dual), filed by the family of their addresses.
func (a *Allocation) setRelays(first, extra Relay) {
	a.relay = first
	a.relays[familyIndex(first.Addr().Addr())] = first
	if extra != nil {
		a.relays[familyIndex(extra.Addr().Addr())] = extra
	}
}

// Expires returns the allocation's expiry as unix nanoseconds.
func (a *Allocation) Expires() int64 { return a.expires.Load() }

// Deleted reports whether the allocation has been deleted; a relay reader
// that still holds it drops what it reads.
func (a *Allocation) Deleted() bool { return a.deleted.Load() }

// hasPermission reports whether a live permission exists for the peer's IP.
func (a *Allocation) hasPermission(peer netip.Addr, now int64) bool {
	return a.permission(peer, now) != nil
}

// permission returns the live permission for the peer's IP, or nil.
func (a *Allocation) permission(peer netip.Addr, now int64) *permission {
	p := a.perms.get(keyOfAddr(peer, 0))
	if p != nil && p.expires.Load() > now {
		return p
	}
	return nil
}

// channelByNumber returns the live channel with number n, or nil.
func (a *Allocation) channelByNumber(n uint16, now int64) *channel {
	t := a.nums.Load()
	if t == nil {
		return nil
	}
	s := t.slot(n, false)
	if s == nil {
		return nil
	}
	if c := s.Load(); c != nil && c.expires.Load() > now {
		return c
	}
	return nil
}

// permitted reports whether a live permission exists for c's peer IP.
func (a *Allocation) permitted(c *channel, now int64) bool {
	if p := c.perm.Load(); p != nil && p.expires.Load() > now {
		return true
	}
	return a.hasPermission(c.peer.Addr(), now)
}

// channelByPeer returns the live channel bound to peer, or nil.
func (a *Allocation) channelByPeer(peer netip.AddrPort, now int64) *channel {
	c := a.byPeer.get(keyOfAddr(peer.Addr(), peer.Port()))
	if c != nil && c.expires.Load() > now {
		return c
	}
	return nil
}

// permissionRoom reports whether permissions for peers (IPs) fit under
// MaxPermissions, counting only those not installed yet. The caller holds
// a.mu.
func (a *Allocation) permissionRoom(peers ...netip.Addr) bool {
	return a.perms.n+a.newPermissions(peers...) <= MaxPermissions
}

// newPermissions counts the distinct peers (IPs) that have no permission
// installed yet. The caller holds a.mu.
func (a *Allocation) newPermissions(peers ...netip.Addr) int {
	n := 0
	for i, p := range peers {
		if a.perms.get(keyOfAddr(p, 0)) != nil {
			continue
		}
		dup := false
		for _, q := range peers[:i] {
			dup = dup || q == p
		}
		if !dup {
			n++
		}
	}
	return n
}

// addPermission installs or refreshes the permission for peer until
// expires, counted under cluster, and returns it. The caller holds a.mu and
// has checked permissionRoom.
func (a *Allocation) addPermission(peer netip.Addr, expires int64, cluster uint32) *permission {
	k := keyOfAddr(peer, 0)
	if p := a.perms.get(k); p != nil {
		p.expires.Store(expires)
		p.cluster.Store(cluster)
		return p
	}
	p := &permission{peer: peer, key: k}
	p.expires.Store(expires)
	p.cluster.Store(cluster)
	a.perms.insert(p)
	return p
}

// permissionFor installs the permission for a channel's peer IP with the
// channel's cluster, or refreshes one that exists, keeping its cluster (a
// CreatePermission set it for the IP as a whole). The caller holds a.mu.
func (a *Allocation) permissionFor(peer netip.Addr, expires int64, cluster uint32) *permission {
	if p := a.perms.get(keyOfAddr(peer, 0)); p != nil {
		p.expires.Store(expires)
		return p
	}
	return a.addPermission(peer, expires, cluster)
}

// bindResult is the outcome of bindChannel.
type bindResult uint8

const (
	bound      bindResult = iota
	conflict              // 400: the number or the peer is bound otherwise
	full                  // 508: MaxChannels or MaxPermissions reached
	overBudget            // 508: Settings.StateBudget reached
)

// bindChannel binds number to peer and installs the peer's permission, or
// refreshes both, following RFC 8656 §11.2: a number bound to another
// peer, or a peer bound to another number, is a conflict while that
// binding lives; an expired one is replaced. Packets on the channel are
// counted under cluster. The caller holds a.mu.
func (a *Allocation) bindChannel(number uint16, peer netip.AddrPort, now, expires, permExpires int64, cluster uint32) bindResult {
	nums := a.nums.Load()
	k := keyOfAddr(peer.Addr(), peer.Port())
	var byNum *atomic.Pointer[channel]
	if nums != nil {
		byNum = nums.slot(number, false)
	}
	var old *channel
	if byNum != nil {
		old = byNum.Load()
	}
	newPerm := int64(a.newPermissions(peer.Addr()))
	if old != nil && old.key == k {
		if !a.permissionRoom(peer.Addr()) {
			return full
		}
		if !a.charge(newPerm * PermissionCost) {
			return overBudget
		}
		old.expires.Store(expires)
		old.cluster.Store(cluster)
		old.perm.Store(a.permissionFor(peer.Addr(), permExpires, cluster))
		if a.obs != nil {
			a.syncPath(old, now)
		}
		return bound
	}
	other := a.byPeer.get(k)
	if (old != nil && old.expires.Load() > now) || (other != nil && other.expires.Load() > now) {
		return conflict
	}
	if a.byPeer.n-btoi(old != nil)-btoi(other != nil) >= MaxChannels || !a.permissionRoom(peer.Addr()) {
		return full
	}
	// The binding, its peer's permission if new, and the parts of the
	// number table it needs are charged before anything is made.
	cost := ChannelCost + newPerm*PermissionCost
	switch {
	case nums == nil:
		cost += chanDirCost + chanPageCost
		if number > maxStrictChannelNumber {
			cost += chanHighCost
		}
	case byNum == nil:
		cost += chanPageCost
		if number > maxStrictChannelNumber && nums.high.Load() == nil {
			cost += chanHighCost
		}
	}
	if !a.charge(cost) {
		return overBudget
	}
	if nums == nil {
		nums = new(chanNumbers)
		a.nums.Store(nums)
	}
	// Expired bindings of this number or peer give way to the new one.
	for _, o := range []*channel{old, other} {
		if o != nil {
			a.unbind(nums, o)
		}
	}
	c := &channel{number: number, peer: peer, key: k}
	c.expires.Store(expires)
	c.cluster.Store(cluster)
	c.perm.Store(a.permissionFor(peer.Addr(), permExpires, cluster))
	a.byPeer.insert(c)
	nums.slot(number, true).Store(c)
	if a.obs != nil {
		a.syncPath(c, now)
	}
	return bound
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unbind removes channel c. The caller holds a.mu.
func (a *Allocation) unbind(nums *chanNumbers, c *channel) {
	if a.obs != nil {
		a.pathDown(c)
	}
	a.refund(ChannelCost * int64(a.byPeer.removeIf(func(o *channel) bool { return o == c })))
	nums.slot(c.number, true).CompareAndSwap(c, nil)
}

// dropChannels removes the channels drop reports true for; each is
// cleared from the number table as the peer index lets it go. The caller
// holds a.mu.
func (a *Allocation) dropChannels(drop func(*channel) bool) {
	nums := a.nums.Load()
	if nums == nil {
		return
	}
	gone := a.byPeer.removeIf(func(c *channel) bool {
		if !drop(c) {
			return false
		}
		if a.obs != nil {
			a.pathDown(c)
		}
		nums.slot(c.number, true).CompareAndSwap(c, nil)
		return true
	})
	a.refund(ChannelCost * int64(gone))
}

// prune drops expired permissions and channels. The caller holds a.mu.
func (a *Allocation) prune(now int64) {
	gone := a.perms.removeIf(func(p *permission) bool { return p.expires.Load() <= now })
	a.refund(PermissionCost * int64(gone))
	a.dropChannels(func(c *channel) bool { return c.expires.Load() <= now })
	// (A removed permission had expired, which is what channel.perm's
	// readers check.) Channels that outlive their peer's permission are no
	// longer relayable.
	if gone > 0 && a.obs != nil {
		a.syncPaths(now)
	}
}

// revoke drops permissions and channels whose peer the transport no longer
// allows (after a route change), and files those that stay under the
// cluster that now admits them. The caller holds a.mu.
func (a *Allocation) revoke(allowed func(netip.AddrPort) (uint32, bool), now int64) {
	defer func() {
		if a.obs != nil {
			a.syncPaths(now)
		}
	}()
	a.dropChannels(func(c *channel) bool {
		cluster, ok := allowed(c.peer)
		if ok {
			c.cluster.Store(cluster)
		}
		return !ok
	})
	// A permission is per IP; port 0 asks "any port of this IP".
	a.refund(PermissionCost * int64(a.perms.removeIf(func(p *permission) bool {
		if cluster, ok := allowed(netip.AddrPortFrom(p.peer, 0)); ok {
			p.cluster.Store(cluster)
			return false
		}
		p.expires.Store(0) // for channel.perm's readers
		return true
	})))
}
