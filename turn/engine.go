package turn

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Lifetimes fixed by RFC 8656.
const (
	// ReservationLifetime is how long a port reserved by EVEN-PORT with the
	// R bit waits for the Allocate that claims it (RFC 8656 §14.9
	// suggests 30 s); the reservation holds quota until then.
	ReservationLifetime = 30 * time.Second
	// DefaultLifetime is the allocation lifetime when the client asks for
	// less or nothing (RFC 8656 §7.2): 600 s.
	DefaultLifetime = 600 * time.Second
	// PermissionLifetime is how long a permission lasts (RFC 8656 §9): 300 s.
	PermissionLifetime = 300 * time.Second
	// ChannelLifetime is how long a channel binding lasts (RFC 8656 §12): 600 s.
	ChannelLifetime = 600 * time.Second
)

// Errors a RelayAllocator returns; the engine maps them to error responses.
var (
	// ErrNoCapacity: no relay port is free, or the reservation token is
	// unknown or expired (508 Insufficient Capacity, RFC 8656 §7.2).
	ErrNoCapacity = errors.New("turn: no relay capacity")
	// ErrAddressFamily: no relay address of the requested family (440).
	ErrAddressFamily = errors.New("turn: address family not supported")
	// ErrDontFragment: the relay cannot set DF; the client gets 420 with
	// DONT-FRAGMENT in UNKNOWN-ATTRIBUTES (RFC 8656 §7.2) and may retry without.
	ErrDontFragment = errors.New("turn: DONT-FRAGMENT not supported")
)

// RelayRequest is what an Allocate asks of the relay socket (RFC 8656 §7.2).
type RelayRequest struct {
	// Client is the allocation's 5-tuple.
	Client FiveTuple
	// IPv6 asks for an IPv6 relayed address (REQUESTED-ADDRESS-FAMILY, or
	// the second relay of an ADDITIONAL-ADDRESS-FAMILY allocation).
	IPv6 bool
	// Default says the client named no family: an IPv4 relayed address,
	// or an IPv6 one when the allocator has no IPv4 relay address (where
	// RFC 8656 §7.2 would answer 440, which would leave an IPv6-only
	// cluster unusable by clients that never send
	// REQUESTED-ADDRESS-FAMILY).
	Default bool
	// EvenPort asks for an even port (EVEN-PORT); ReservePair also reserves
	// the next port for a later Allocate that presents the returned token.
	EvenPort    bool
	ReservePair bool
	// Token, when non-zero, claims a port reserved by an earlier
	// Allocate (RESERVATION-TOKEN). The allocator must hand it only to the
	// Client IP and Username that reserved it (ErrNoCapacity otherwise).
	Token uint64
	// Username is the USERNAME of the request, to which a reservation is
	// bound along with the client IP.
	Username string
	// DontFragment asks for the DF bit on relayed packets (DONT-FRAGMENT).
	DontFragment bool
}

// RelayAllocator opens relay sockets for allocations; the dataplane
// implements it. Allocate returns the relay, the reservation token of a
// reserved pair (0 when none), or ErrNoCapacity, ErrAddressFamily or
// ErrDontFragment. The
// allocation a is not yet in the table when Allocate runs; the relay's
// reader may keep a and pass it to HandlePeer.
type RelayAllocator interface {
	Allocate(a *Allocation, req RelayRequest) (Relay, uint64, error)
}

// Settings are the engine's tunables that a config reload may change in place.
type Settings struct {
	// Realm is sent in REALM and keys MESSAGE-INTEGRITY.
	Realm string
	// Auth finds credential keys.
	Auth Authenticator
	// MaxLifetime clamps requested allocation lifetimes; default 600 s.
	MaxLifetime time.Duration
	// NonceLifetime is how long a NONCE is accepted before 438 Stale Nonce
	// (RFC 8489 §9.2.4); default 600 s. Lifetimes above 2^23 s (about 97
	// days) act as 2^23 s: a nonce's issue time wraps every 2^24 s.
	NonceLifetime time.Duration
	// AllocationsPerUser and AllocationsPerIP cap live allocations per
	// USERNAME and per client IP (for IPv6, per /64) with 486 Allocation
	// Quota Reached (RFC 8656 §7.2); 0 is no cap. A port reserved by
	// EVEN-PORT counts as an allocation until claimed or expired.
	AllocationsPerUser int
	AllocationsPerIP   int
	// MaxAllocations caps all live allocations and reservations (508
	// Insufficient Capacity); 0 is no cap.
	MaxAllocations int
	// StateBudget caps the memory that allocations, permissions and
	// channel bindings hold, in bytes, charged at AllocationCost,
	// PermissionCost and ChannelCost (and the channel number pages) each
	// (statebudget.go). An Allocate, CreatePermission or ChannelBind that
	// would pass it gets 508 Insufficient Capacity and installs nothing;
	// refreshes of what exists cost nothing. 0 is no budget. Lowering it
	// below what is in use deletes nothing: new state is refused until
	// enough expires.
	StateBudget int64
	// AuthFailureBurst and AuthFailureRate throttle failed authentication
	// per client address (IP; /64 for IPv6): a token bucket of
	// AuthFailureBurst tokens refilled at AuthFailureRate per second, one
	// token per request whose MESSAGE-INTEGRITY, USERNAME or REALM fails
	// (401) under a live NONCE this engine issued to that address. A
	// nonce that is forged, malformed, another address's or expired gets
	// 438 and costs nothing, since anyone can forge a UDP source address
	// but only a host at that address receives its nonces (RFC 8489
	// §9.2.4). While a source has no token, its requests with a live nonce
	// and MESSAGE-INTEGRITY are dropped unanswered (DropThrottled). The
	// same failures also take a token from the USERNAME's bucket (10× the
	// burst and rate) and the engine's (100×); a request that finds either
	// empty is dropped too, unless its source address authenticated as
	// that username within the last hour (budgets.go), so rotating source
	// addresses does not multiply the rate of guesses. A burst or a rate of
	// 0 turns all three off.
	AuthFailureBurst int
	AuthFailureRate  float64
	// StrictChannelNumbers limits ChannelBind to RFC 8656 §12's channel
	// numbers 0x4000-0x4FFF: 0x5000-0x7FFF, which RFC 5766 allowed and
	// coturn's turnutils_uclient uses, then get 400 Bad Request. Off (the
	// default), 0x4000-0x7FFF are accepted, as coturn and pion/turn do.
	StrictChannelNumbers bool
	// Alternates are the servers an Allocate is redirected to with 300
	// Try Alternate and ALTERNATE-SERVER (RFC 8489 §10) when the engine is
	// draining or at its capacity (MaxAllocations, StateBudget, no free
	// relay port); with none
	// of the client's address family, such an Allocate gets 508 as before.
	// A port of 0 stands for the port of the listener the request arrived
	// on. An alternate equal to that listener address is never offered
	// (alternate.go).
	Alternates []netip.AddrPort
	// STUNOnly makes the engine a STUN server (STUNner's stunMode):
	// Binding requests are answered and every TURN request gets 403
	// Forbidden unauthenticated (see refuseTURN), so no allocation is made.
	STUNOnly bool
}

// Config builds an Engine.
type Config struct {
	Settings
	// Relays opens relay sockets. Required.
	Relays RelayAllocator
	// Clock defaults to SystemClock.
	Clock Clock
	// Logger gets session-level events (allocation created and deleted,
	// with the client's 5-tuple); nothing per packet. Default slog.Default().
	Logger *slog.Logger
	// Software, when set, is sent in SOFTWARE on responses.
	Software string
	// RelayCost is the bytes of memory one relay socket holds in
	// Relays (user space), charged against Settings.StateBudget with each
	// allocation's relay sockets. 0 charges nothing for them.
	RelayCost int64
	// PathObserver, when set, hears the channel bindings of plain
	// TURN-UDP allocations come and go (see PathObserver). Nil costs
	// nothing.
	PathObserver PathObserver
}

// Engine is the TURN server state machine. It is safe for concurrent use by
// any number of listener and relay workers.
type Engine struct {
	relays    RelayAllocator
	clock     Clock
	log       *slog.Logger
	software  string
	paths     PathObserver
	relayCost int64
	nonces    *nonceMaker
	settings  atomic.Pointer[Settings]
	allocs    table
	draining  atomic.Bool
	refusals  refusalLog
	throttle  throttle // failure budgets per client address (quotaAddr)
	// userFailures and totalFailures are the failure budgets per
	// USERNAME and for the engine; trustedSrc exempts from them the
	// addresses that recently authenticated as the username (budgets.go).
	userFailures  throttle
	totalFailures totalBucket
	trustedSrc    trusted
	// allocErrors counts Allocate error responses by code.
	allocErrors allocErrors
	// redirects counts 300 Try Alternate responses by reason.
	redirects redirectCounts
	// preferred, when set, are the alternates new clients are sent to for
	// balance (SetPreferred).
	preferred atomic.Pointer[[]netip.AddrPort]
	// state counts the bytes of allocations, permissions and channel
	// bindings against Settings.StateBudget.
	state stateBudget

	// Quota slots: live allocations, allocations being made, and ports
	// reserved by EVEN-PORT, per user, per client address (quotaAddr) and
	// in total.
	quotaMu      sync.Mutex
	perUser      map[string]int
	perIP        map[netip.Addr]int
	slots        int
	reservations map[uint64]reservation
}

// New returns an Engine, or an error when cfg lacks Relays, Auth or Realm.
func New(cfg Config) (*Engine, error) {
	if cfg.Relays == nil {
		return nil, errors.New("turn: Config.Relays is required")
	}
	e := &Engine{
		relays:    cfg.Relays,
		clock:     cfg.Clock,
		log:       cfg.Logger,
		software:  cfg.Software,
		paths:     cfg.PathObserver,
		relayCost: max(cfg.RelayCost, 0),
		nonces:    newNonceMaker(),
		perUser:   map[string]int{},
		perIP:     map[netip.Addr]int{},

		reservations: map[uint64]reservation{},
	}
	if e.clock == nil {
		e.clock = SystemClock{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if err := e.Reconfigure(cfg.Settings); err != nil {
		return nil, err
	}
	return e, nil
}

// Reconfigure swaps in new settings; requests already being handled finish
// with the old ones. Existing allocations keep their credentials. It returns
// an error, and changes nothing, when Realm or Auth is missing.
func (e *Engine) Reconfigure(s Settings) error {
	if s.Realm == "" {
		return errors.New("turn: Settings.Realm is required")
	}
	if s.Auth == nil {
		return errors.New("turn: Settings.Auth is required")
	}
	if s.MaxLifetime <= 0 {
		s.MaxLifetime = DefaultLifetime
	}
	if s.NonceLifetime <= 0 {
		s.NonceLifetime = 600 * time.Second
	}
	e.settings.Store(&s)
	e.state.limit.Store(max(s.StateBudget, 0))
	return nil
}

// SetDraining makes the engine refuse new allocations while existing ones
// keep relaying, refreshing and binding channels, for a graceful shutdown:
// an Allocate is redirected to one of Settings.Alternates (300 Try
// Alternate, RFC 8489 §10) or, with none, refused with 508 Insufficient
// Capacity. false lifts it.
func (e *Engine) SetDraining(v bool) { e.draining.Store(v) }

// Allocations returns the number of live allocations.
func (e *Engine) Allocations() int { return int(e.allocs.count.Load()) }

// Lookup returns the allocation of a 5-tuple, or nil.
func (e *Engine) Lookup(ft FiveTuple) *Allocation { return e.allocs.get(ft) }

func (e *Engine) now() int64 { return e.clock.Now().UnixNano() }

// ResultKind says what HandleClient wants done with a packet.
type ResultKind uint8

// Result kinds.
const (
	// Drop: nothing to send; Result.Drop says why.
	Drop ResultKind = iota
	// Reply: send Result.Reply to the client on the transport it came from.
	Reply
	// Forward: send Result.Payload from the allocation's relay socket
	// of Result.Peer's family (Result.Alloc.RelayFor) to Result.Peer.
	Forward
)

// DropReason says why a packet was dropped, for per-worker counters.
type DropReason uint8

// Drop reasons.
const (
	DropNone DropReason = iota
	// DropMalformed: not STUN or ChannelData, truncated, or failed FINGERPRINT.
	DropMalformed
	// DropNoAllocation: ChannelData or Send from a 5-tuple with no allocation.
	DropNoAllocation
	// DropNoChannel: ChannelData on an unbound channel.
	DropNoChannel
	// DropNoPermission: no permission for the peer's IP.
	DropNoPermission
	// DropForbidden: the peer is not in the listener's allowlist.
	DropForbidden
	// DropUnexpected: a STUN message the server ignores (a response, an
	// indication other than Send).
	DropUnexpected
	// DropThrottled: a request with MESSAGE-INTEGRITY from a source, or for
	// a USERNAME, that has used up its authentication failure budget, or
	// while the engine's is used up (Settings.AuthFailureBurst).
	DropThrottled
	numDropReasons
)

// NumDropReasons is the number of DropReason values, for counter arrays.
const NumDropReasons = int(numDropReasons)

// String names the reason for metrics labels.
func (d DropReason) String() string {
	switch d {
	case DropNone:
		return "none"
	case DropMalformed:
		return "malformed"
	case DropNoAllocation:
		return "no_allocation"
	case DropNoChannel:
		return "no_channel"
	case DropNoPermission:
		return "no_permission"
	case DropForbidden:
		return "forbidden"
	case DropUnexpected:
		return "unexpected"
	case DropThrottled:
		return "throttled"
	}
	return "unknown"
}

// Result is the outcome of HandleClient. Callers reuse one Result per
// worker; HandleClient overwrites every field it sets.
type Result struct {
	Kind ResultKind
	Drop DropReason
	// Reply is the response to send back (Kind Reply). It is freshly
	// allocated; the caller may keep it.
	Reply []byte
	// Alloc, Peer and Payload describe a packet to relay (Kind Forward).
	// Payload aliases the packet passed to HandleClient.
	Alloc   *Allocation
	Peer    netip.AddrPort
	Payload []byte
	// Cluster is the transport's cluster number for Peer (Kind Forward;
	// see Transport.PeerCluster).
	Cluster uint32
}

func (r *Result) drop(why DropReason) {
	r.Kind, r.Drop, r.Reply, r.Alloc, r.Payload, r.Cluster = Drop, why, nil, nil, nil, 0
}

// HandleClient processes one packet pkt received from client ft on
// transport tr: a STUN request or indication, or a ChannelData message
// (RFC 8656 §12.4). On a stream transport pkt must be one whole framed
// message. The outcome is written to r; a malformed packet is dropped and
// reported, never a panic. It does not keep pkt, except through r.Payload.
func (e *Engine) HandleClient(tr Transport, ft FiveTuple, pkt []byte, r *Result) {
	switch {
	case isChannelData(pkt):
		e.channelData(ft, pkt, r)
	case !isSTUN(pkt):
		r.drop(DropMalformed)
	case binary.BigEndian.Uint16(pkt[0:2]) == typeSendIndication:
		e.sendIndication(tr, ft, pkt, r)
	default:
		e.request(tr, ft, pkt, r)
	}
}

// channelData relays a ChannelData message (RFC 8656 §12.5).
func (e *Engine) channelData(ft FiveTuple, pkt []byte, r *Result) {
	if len(pkt) < channelDataHdr {
		r.drop(DropMalformed)
		return
	}
	num := binary.BigEndian.Uint16(pkt[0:2])
	n := int(binary.BigEndian.Uint16(pkt[2:4]))
	if channelDataHdr+n > len(pkt) {
		r.drop(DropMalformed)
		return
	}
	a := e.allocs.get(ft)
	if a == nil {
		r.drop(DropNoAllocation)
		return
	}
	now := e.now()
	c := a.channelByNumber(num, now)
	if c == nil {
		// Under StrictChannelNumbers a number above 0x4FFF is never
		// bound, so it is not ChannelData of RFC 8656 §12.4 at all.
		if num > maxStrictChannelNumber && e.settings.Load().StrictChannelNumbers {
			r.drop(DropMalformed)
		} else {
			r.drop(DropNoChannel)
		}
		return
	}
	if !a.permitted(c, now) {
		r.drop(DropNoPermission)
		return
	}
	r.Kind, r.Drop, r.Reply, r.Cluster = Forward, DropNone, nil, c.cluster.Load()
	r.Alloc, r.Peer, r.Payload = a, c.peer, pkt[channelDataHdr:channelDataHdr+n]
}

// sendIndication relays the DATA of a Send indication (RFC 8656 §10.2). It
// walks the attributes itself instead of decoding with pion so that it makes
// no allocation.
func (e *Engine) sendIndication(tr Transport, ft FiveTuple, pkt []byte, r *Result) {
	size := stunHeaderSize + int(binary.BigEndian.Uint16(pkt[2:4]))
	if size > len(pkt) {
		r.drop(DropMalformed)
		return
	}
	txid := pkt[8:20]
	var (
		peer            netip.AddrPort
		data            []byte
		hasPeer, hasDat bool
	)
	for b := pkt[stunHeaderSize:size]; len(b) > 0; {
		if len(b) < attrHeaderSize {
			r.drop(DropMalformed)
			return
		}
		t := binary.BigEndian.Uint16(b[0:2])
		l := int(binary.BigEndian.Uint16(b[2:4]))
		if attrHeaderSize+l > len(b) {
			r.drop(DropMalformed)
			return
		}
		v := b[attrHeaderSize : attrHeaderSize+l]
		switch t {
		case attrXORPeerAddress:
			if !hasPeer {
				peer, hasPeer = parseXORAddr(v, txid)
				if !hasPeer {
					r.drop(DropMalformed)
					return
				}
			}
		case attrData:
			if !hasDat {
				data, hasDat = v, true
			}
		}
		adv := attrHeaderSize + pad4(l)
		if adv > len(b) {
			adv = len(b)
		}
		b = b[adv:]
	}
	if !hasPeer || !hasDat {
		r.drop(DropMalformed)
		return
	}
	a := e.allocs.get(ft)
	if a == nil {
		r.drop(DropNoAllocation)
		return
	}
	if !a.hasPermission(peer.Addr(), e.now()) {
		r.drop(DropNoPermission)
		return
	}
	cluster, ok := tr.PeerCluster(peer)
	if !ok {
		r.drop(DropForbidden)
		return
	}
	r.Kind, r.Drop, r.Reply, r.Cluster = Forward, DropNone, nil, cluster
	r.Alloc, r.Peer, r.Payload = a, peer, data
}

// HandlePeer frames a datagram that a's relay socket received from peer for
// the client (RFC 8656 §11.3 and §12.5): as ChannelData when a channel is
// bound to peer, else as a Data indication. The payload is buf[off:off+n];
// off must be at least PeerHeadroom and buf must have PeerTailroom bytes
// after the payload, so that the message is built in place. It returns the
// message to send to a.FiveTuple.Client over a.Transport and the
// transport's cluster number for the peer (see Transport.PeerCluster: the
// channel's, else the permission's), or false when the datagram must be
// dropped (no permission for the peer's IP, or the allocation is gone).
func (e *Engine) HandlePeer(a *Allocation, peer netip.AddrPort, buf []byte, off, n int) (msg []byte, cluster uint32, ok bool) {
	if off < PeerHeadroom || off+n+PeerTailroom > len(buf) || n > 0xFFFF-PeerHeadroom {
		return nil, 0, false
	}
	if a.deleted.Load() {
		return nil, 0, false
	}
	now := e.now()
	c := a.channelByPeer(peer, now)
	if c != nil {
		if !a.permitted(c, now) {
			return nil, 0, false
		}
		cluster = c.cluster.Load()
	} else {
		p := a.permission(peer.Addr(), now)
		if p == nil {
			return nil, 0, false
		}
		cluster = p.cluster.Load()
	}
	end := off + n
	if c != nil {
		start := off - channelDataHdr
		binary.BigEndian.PutUint16(buf[start:], c.number)
		binary.BigEndian.PutUint16(buf[start+2:], uint16(n))
		if a.FiveTuple.Proto.stream() {
			for (end-off)&3 != 0 {
				buf[end] = 0
				end++
			}
		}
		return buf[start:end], cluster, true
	}
	alen := xorAddrLen(peer)
	start := off - (stunHeaderSize + attrHeaderSize + alen + attrHeaderSize)
	h := buf[start:]
	binary.BigEndian.PutUint16(h[0:2], typeDataIndication)
	binary.BigEndian.PutUint16(h[2:4], uint16(attrHeaderSize+alen+attrHeaderSize+pad4(n)))
	binary.BigEndian.PutUint32(h[4:8], magicCookie)
	binary.LittleEndian.PutUint64(h[8:16], rand.Uint64())
	binary.LittleEndian.PutUint32(h[16:20], rand.Uint32())
	p := h[stunHeaderSize:]
	binary.BigEndian.PutUint16(p[0:2], attrXORPeerAddress)
	binary.BigEndian.PutUint16(p[2:4], uint16(alen))
	putXORAddr(p[4:], peer, h[8:20])
	d := p[attrHeaderSize+alen:]
	binary.BigEndian.PutUint16(d[0:2], attrData)
	binary.BigEndian.PutUint16(d[2:4], uint16(n))
	for (end-off)&3 != 0 {
		buf[end] = 0
		end++
	}
	return buf[start:end], cluster, true
}

// logs reports whether the engine's logger writes records of level l. The
// lines logged once per allocation guard on it, so that formatting their
// 5-tuple and relay address costs nothing when the level is off (it was
// 7% of the garbage per allocation at the default warn level of a bench).
func (e *Engine) logs(l slog.Level) bool { return e.log.Enabled(context.Background(), l) }
