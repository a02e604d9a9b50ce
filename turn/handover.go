package turn

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/pion/stun/v2"
)

// What a successor process needs of the engine to carry allocations on
// (the hand-over between two ternd processes, dataplane/takeover): the
// state of each allocation, the nonce key, and a way to put allocations
// back with the relay sockets it received.

// AllocationState is one allocation as Export reports it and Import takes
// it back: everything the engine keeps of it except the clusters of its
// peers, which the importing transport decides again (Transport.PeerCluster),
// and its budget charges, which the importing engine makes again.
type AllocationState struct {
	// FiveTuple is the allocation's 5-tuple (RFC 8656 §2).
	FiveTuple FiveTuple
	// Username is the USERNAME that created it.
	Username string
	// Relays are its relayed transport addresses: the first, then the
	// IPv6 one of a dual allocation (RFC 8656 §7.2). One or two.
	Relays []netip.AddrPort
	// Expires is its expiry, unix nanoseconds.
	Expires int64
	// LastTxID is the transaction ID of the Allocate that made it, so
	// that a retransmission still gets its success response.
	LastTxID [12]byte
	// Token is the RESERVATION-TOKEN its Allocate returned, 0 if none.
	Token uint64
	// AddressError is the ADDRESS-ERROR-CODE of a dual allocation whose
	// IPv6 relay could not be opened (RFC 8656 §7.2), 0 otherwise.
	AddressError uint16
	// Permissions are its permissions (RFC 8656 §9), by peer IP.
	Permissions []PermissionState
	// Channels are its channel bindings (RFC 8656 §12).
	Channels []ChannelState
}

// PermissionState is a permission of an AllocationState.
type PermissionState struct {
	Peer    netip.Addr
	Expires int64 // unix ns
}

// ChannelState is a channel binding of an AllocationState.
type ChannelState struct {
	Number  uint16
	Peer    netip.AddrPort
	Expires int64 // unix ns
}

// State returns what Import needs to make a again in another engine. It
// takes the allocation's lock, so it is consistent with concurrent
// ChannelBinds and CreatePermissions.
func (a *Allocation) State() AllocationState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := AllocationState{
		FiveTuple:    a.FiveTuple,
		Username:     a.Username,
		Expires:      a.expires.Load(),
		LastTxID:     a.lastTxID,
		Token:        a.token,
		AddressError: uint16(a.extraErr),
	}
	for _, r := range a.Relays() {
		st.Relays = append(st.Relays, r.Addr())
	}
	a.perms.each(func(p *permission) {
		st.Permissions = append(st.Permissions, PermissionState{Peer: p.peer, Expires: p.expires.Load()})
	})
	a.byPeer.each(func(c *channel) {
		st.Channels = append(st.Channels, ChannelState{Number: c.number, Peer: c.peer, Expires: c.expires.Load()})
	})
	// In a fixed order, not the tables' (seeded hashes): the same allocation gives the same
	// state, and so the same snapshot bytes.
	slices.SortFunc(st.Permissions, func(x, y PermissionState) int { return x.Peer.Compare(y.Peer) })
	slices.SortFunc(st.Channels, func(x, y ChannelState) int { return int(x.Number) - int(y.Number) })
	return st
}

// Export calls f for every live allocation (not yet deleted). The caller
// keeps the engine from changing allocations meanwhile if it needs a
// consistent table (the dataplane stops its listeners' and relays' readers
// and the sweep first).
func (e *Engine) Export(f func(*Allocation)) {
	e.allocs.each(func(a *Allocation) {
		if !a.deleted.Load() {
			f(a)
		}
	})
}

// NonceKey returns the key the engine's NONCE values are made with
// (nonce.go), so that a successor keeps accepting the nonces this engine
// issued (RFC 8489 §9.2).
func (e *Engine) NonceKey() [32]byte { return e.nonces.key }

// SetNonceKey makes the engine issue and check NONCE values with k. It must
// be called before the engine handles any packet.
func (e *Engine) SetNonceKey(k [32]byte) {
	n := &nonceMaker{key: k}
	e.nonces = n
}

// Settings returns the settings in force.
func (e *Engine) Settings() Settings { return *e.settings.Load() }

// ErrImport wraps every error of Import.
var ErrImport = errors.New("turn: import")

// Import puts an allocation exported by another engine (State) into this
// one, made over transport tr. open is given the new allocation (not yet in
// the table) and returns its relay sockets, one per st.Relays address in
// that order (the dataplane adopts the sockets the old process handed
// over). Permissions and channels whose peer tr no longer allows are
// dropped, as by Revalidate; the others are filed under the cluster tr
// gives now. Quota slots and the state budget are charged for it without
// checking their caps: an allocation that exists is never refused.
//
// It returns an error wrapping ErrImport, and installs nothing, when the
// state is invalid (no relay or more than two, a protocol other than UDP
// or DTLS (whose associations the dataplane hands over),
// a channel number out of range, more permissions or channels than an
// allocation may hold) or the 5-tuple has an allocation already; an error
// of open is returned wrapped too.
func (e *Engine) Import(st AllocationState, tr Transport, open func(*Allocation) ([]Relay, error)) (*Allocation, error) {
	if err := st.validate(); err != nil {
		return nil, fmt.Errorf("%w: allocation %s: %v", ErrImport, st.FiveTuple, err)
	}
	if e.allocs.get(st.FiveTuple) != nil {
		return nil, fmt.Errorf("%w: allocation %s: 5-tuple has an allocation already", ErrImport, st.FiveTuple)
	}
	a := &Allocation{FiveTuple: st.FiveTuple, Transport: tr, Username: st.Username, lastTxID: st.LastTxID,
		token: st.Token}
	if st.FiveTuple.Proto == ProtoUDP {
		a.obs = e.paths
	}
	relays, err := open(a)
	if err != nil {
		return nil, fmt.Errorf("%w: allocation %s: relay sockets: %w", ErrImport, st.FiveTuple, err)
	}
	if len(relays) != len(st.Relays) {
		for _, r := range relays {
			_ = r.Close()
		}
		return nil, fmt.Errorf("%w: allocation %s: %d relay sockets for %d relayed addresses", ErrImport, st.FiveTuple, len(relays), len(st.Relays))
	}
	var extra Relay
	if len(relays) == 2 {
		extra = relays[1]
	}
	a.setRelays(relays[0], extra)
	a.extraErr = stun.ErrorCode(st.AddressError)
	a.expires.Store(st.Expires)

	// Charge what the state costs here, whatever the budget: a local
	// budget without a limit counts it, and the engine's is then charged
	// the sum.
	var local stateBudget
	a.state = &local
	a.charged = 0
	a.charge(AllocationCost + e.relayCost*int64(len(relays)))
	now := e.now()
	a.mu.Lock()
	for _, p := range st.Permissions {
		if cluster, ok := tr.PeerCluster(netip.AddrPortFrom(p.Peer, 0)); ok {
			if a.perms.get(keyOfAddr(p.Peer, 0)) == nil {
				a.charge(PermissionCost)
			}
			a.addPermission(p.Peer, p.Expires, cluster)
		}
	}
	for _, c := range st.Channels {
		cluster, ok := tr.PeerCluster(c.Peer)
		if !ok {
			continue
		}
		// bindChannel installs the peer's permission too; one that the
		// state has keeps its expiry, one it lacks (expired and pruned
		// since) is installed expired, so relaying stays refused until
		// the client refreshes it, as before the hand-over.
		permExp := int64(0)
		if p := a.perms.get(keyOfAddr(c.Peer.Addr(), 0)); p != nil {
			permExp = p.expires.Load()
		}
		a.bindChannel(c.Number, c.Peer, now, c.Expires, permExp, cluster)
	}
	a.state = &e.state
	e.state.used.Add(a.charged)
	a.mu.Unlock()

	if existing := e.allocs.insert(a); existing != nil {
		a.mu.Lock()
		a.deleted.Store(true)
		if a.obs != nil {
			a.byPeer.each(a.pathDown)
		}
		a.refund(a.charged)
		a.mu.Unlock()
		for _, r := range a.Relays() {
			_ = r.Close()
		}
		return nil, fmt.Errorf("%w: allocation %s: 5-tuple has an allocation already", ErrImport, st.FiveTuple)
	}
	e.quotaMu.Lock()
	user, ip := quotaUserKey(a.Username), quotaAddr(a.FiveTuple.Client.Addr())
	e.perUser[user]++
	e.perIP[ip]++
	e.slots++
	e.quotaMu.Unlock()
	return a, nil
}

// validate checks what Import cannot install.
func (st *AllocationState) validate() error {
	switch {
	case st.FiveTuple.Proto != ProtoUDP && st.FiveTuple.Proto != ProtoDTLS:
		return fmt.Errorf("protocol %s: only TURN-UDP and TURN-DTLS allocations are imported", st.FiveTuple.Proto)
	case !st.FiveTuple.Client.IsValid() || !st.FiveTuple.Server.IsValid():
		return errors.New("5-tuple: invalid address")
	case len(st.Relays) < 1 || len(st.Relays) > 2:
		return fmt.Errorf("relays: %d, want 1 or 2", len(st.Relays))
	case len(st.Relays) == 2 && familyIndex(st.Relays[0].Addr()) == familyIndex(st.Relays[1].Addr()):
		return errors.New("relays: two of one address family")
	case len(st.Permissions) > MaxPermissions:
		return fmt.Errorf("permissions: %d, more than %d", len(st.Permissions), MaxPermissions)
	case len(st.Channels) > MaxChannels:
		return fmt.Errorf("channels: %d, more than %d", len(st.Channels), MaxChannels)
	}
	for _, r := range st.Relays {
		if !r.IsValid() {
			return errors.New("relays: invalid address")
		}
	}
	for _, p := range st.Permissions {
		if !p.Peer.IsValid() {
			return errors.New("permissions: invalid peer address")
		}
	}
	seenNum := map[uint16]bool{}
	seenPeer := map[netip.AddrPort]bool{}
	for _, c := range st.Channels {
		if c.Number < minChannelNumber || c.Number > maxChannelNumber {
			return fmt.Errorf("channels: number %#x out of 0x4000-0x7FFF", c.Number)
		}
		if !c.Peer.IsValid() {
			return errors.New("channels: invalid peer address")
		}
		if seenNum[c.Number] || seenPeer[c.Peer] {
			return fmt.Errorf("channels: %#x or %s bound twice", c.Number, c.Peer)
		}
		seenNum[c.Number], seenPeer[c.Peer] = true, true
	}
	return nil
}
