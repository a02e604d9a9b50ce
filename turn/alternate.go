package turn

import (
	"net/netip"
	"sync/atomic"

	"github.com/pion/stun/v2"
)

// Redirecting an Allocate to another server: RFC 8489 §10's ALTERNATE-SERVER
// mechanism, which RFC 8656 §7.2 lets a TURN server use.
//
// An engine that cannot take a new allocation — it is draining (SetDraining)
// or at its capacity (Settings.MaxAllocations, Settings.StateBudget, or no
// free relay port) —
// answers an Allocate with 300 Try Alternate and an ALTERNATE-SERVER of
// Settings.Alternates, when it has one of the client's address family that
// is not this server; otherwise it answers 508 Insufficient Capacity as
// before. The client retries the Allocate there over the same transport
// (RFC 8489 §10), so the alternate's address is all the attribute carries.
//
// When in the Allocate's processing the 300 is sent decides whether
// libwebrtc can follow it. libwebrtc's TURN port (p2p/base/turn_port.cc,
// TurnAllocateRequest::OnTryAlternate) does not check MESSAGE-INTEGRITY on
// a 300, takes the first ALTERNATE-SERVER, refuses one it has tried, one of
// the other family and a loopback one, keeps the REALM and NONCE it has (or
// those of the 300), and sends its next Allocate to the alternate signed if
// it holds a key. A signed Allocate that the alternate answers 438 (the
// nonce is another server's, nonces are keyed per engine) or 401 fails
// there: libwebrtc handles neither on Allocate once it has a key. So the
// first, unsigned Allocate of a client (the one that would get the 401
// challenge) is redirected before authentication, unauthenticated (RFC
// 8489 §10: "The error response message MAY be authenticated"): the client
// meets the alternate with no key, gets its 401 and NONCE there, and
// allocates. A signed Allocate (a client that kept a nonce, or one whose
// 401 came before the drain began) is authenticated first and the 300
// carries MESSAGE-INTEGRITY, as every authenticated response does. No 300
// carries REALM or NONCE: libwebrtc would present them to the alternate,
// which did not issue the nonce.
//
// Loops (RFC 8489 §10): a client must not follow a redirect to a server it
// tried within five minutes; the server side is that an engine never
// offers itself (an alternate equal to the listener address the request
// arrived on), and the dataplane drops the alternates that are its own
// listener or public addresses when it loads the config.

// RedirectReason says why an Allocate was redirected.
type RedirectReason int

// The reasons, in the order of RedirectReasons.
const (
	// RedirectDraining: the engine is draining (SetDraining).
	RedirectDraining RedirectReason = iota
	// RedirectCapacity: the engine is at Settings.MaxAllocations, its
	// state budget has no room for an allocation, or the relay allocator
	// has no free port (ErrNoCapacity; seen only once the request is
	// authenticated, so only a signed Allocate is redirected for it).
	RedirectCapacity
	// RedirectImbalance: this server holds more than its share of its
	// Gateway's allocations (SetPreferred); only a client's first, unsigned
	// Allocate is sent away for it, since nothing is wrong with serving it.
	RedirectImbalance
	redirectReasons
)

// RedirectReasons are the reasons' names, for metrics labels.
var RedirectReasons = [redirectReasons]string{"draining", "capacity", "imbalance"}

// SetPreferred makes alts, a subset of Settings.Alternates that hold fewer
// allocations than this server, the servers a new client's first, unsigned
// Allocate is redirected to (300 Try Alternate, RedirectImbalance), so that
// the replicas of a Gateway even out; nil or empty turns it off. A client
// already challenged (a signed Allocate) is served here: libwebrtc cannot
// take a signed Allocate elsewhere (see the top of this file). The
// dataplane sets it from its peers' allocation counts
// (limits.allocationImbalancePercent).
func (e *Engine) SetPreferred(alts []netip.AddrPort) {
	if len(alts) == 0 {
		e.preferred.Store(nil)
		return
	}
	c := append([]netip.AddrPort(nil), alts...)
	e.preferred.Store(&c)
}

// Preferred returns the alternates SetPreferred set, or nil.
func (e *Engine) Preferred() []netip.AddrPort {
	if p := e.preferred.Load(); p != nil {
		return *p
	}
	return nil
}

// redirectCounts counts 300 responses by reason.
type redirectCounts [redirectReasons]atomic.Uint64

// Redirects returns how many Allocate requests the engine has answered with
// 300 Try Alternate for reason since it started.
func (e *Engine) Redirects(reason RedirectReason) uint64 {
	if reason < 0 || reason >= redirectReasons {
		return 0
	}
	return e.redirects[reason].Load()
}

// Alternates returns the redirect targets in force (Settings.Alternates).
func (e *Engine) Alternates() []netip.AddrPort { return e.settings.Load().Alternates }

// atCapacity reports whether a new allocation would be refused for the
// total allocation cap or the state budget, without reserving anything:
// the redirect decision before authentication. An Allocate that passes it
// may still be refused by the checks of allocate, which redirect too.
func (e *Engine) atCapacity(s *Settings) bool {
	if l := e.state.limit.Load(); l > 0 && e.state.used.Load()+AllocationCost+e.relayCost > l {
		return true
	}
	if s.MaxAllocations <= 0 {
		return false
	}
	e.quotaMu.Lock()
	full := e.slots+1 > s.MaxAllocations
	e.quotaMu.Unlock()
	return full
}

// alternateFor picks the alternates to offer a client of ft: first, one of
// the client's address family (RFC 8489 §10 MUST), chosen by a hash of the
// client's transport address so that a client's retransmissions are sent
// to the same one and clients spread over the list; second, when other is
// set, one of the other family (§10 SHOULD). An alternate with port 0 takes
// the port of the listener the request arrived on. An alternate equal to
// that listener address is never offered. ok is false when no alternate
// of the client's family remains.
func alternateFor(alts []netip.AddrPort, ft FiveTuple, other bool) (same, diff netip.AddrPort, ok bool) {
	v4 := ft.Client.Addr().Unmap().Is4()
	var n int
	for _, a := range alts {
		a = resolvePort(a, ft)
		if a.Addr().Is4() == v4 && a != ft.Server {
			n++
		}
	}
	if n == 0 {
		return same, diff, false
	}
	pick := int(hashAddrPort(ft.Client) % uint64(n))
	for _, a := range alts {
		a = resolvePort(a, ft)
		if a == ft.Server {
			continue
		}
		if a.Addr().Is4() != v4 {
			if other && !diff.IsValid() {
				diff = a
			}
			continue
		}
		if pick == 0 && !same.IsValid() {
			same = a
		}
		pick--
	}
	return same, diff, true
}

// resolvePort gives a port-0 alternate the port of ft's listener.
func resolvePort(a netip.AddrPort, ft FiveTuple) netip.AddrPort {
	a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	if a.Port() == 0 {
		return netip.AddrPortFrom(a.Addr(), ft.Server.Port())
	}
	return a
}

// hashAddrPort is FNV-1a over the address and port.
func hashAddrPort(ap netip.AddrPort) uint64 {
	h := uint64(14695981039346656037)
	b := ap.Addr().As16()
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	h = (h ^ uint64(ap.Port()>>8)) * 1099511628211
	return (h ^ uint64(ap.Port()&0xff)) * 1099511628211
}

// redirect answers the Allocate with 300 Try Alternate and the alternates
// for reason, and reports true; or reports false, sending nothing, when
// there is no alternate for this client (the caller then answers 508).
// Unauthenticated (q.key nil), only the alternate of the client's family
// is sent, so that the answer to a spoofed source stays as small as the
// 401 it would otherwise get.
func (q *req) redirect(reason RedirectReason) ([]byte, bool) {
	return q.redirectTo(reason, q.s.Alternates)
}

// redirectTo is redirect to one of alts.
func (q *req) redirectTo(reason RedirectReason, alts []netip.AddrPort) ([]byte, bool) {
	same, diff, ok := alternateFor(alts, q.ft, q.key != nil)
	if !ok {
		return nil, false
	}
	q.e.redirects[reason].Add(1)
	var ec stun.Setter = stun.CodeTryAlternate
	if q.key == nil {
		ec = &stun.ErrorCodeAttribute{Code: stun.CodeTryAlternate}
	}
	attrs := []stun.Setter{ec, &stun.AlternateServer{IP: same.Addr().AsSlice(), Port: int(same.Port())}}
	if diff.IsValid() {
		attrs = append(attrs, &stun.AlternateServer{IP: diff.Addr().AsSlice(), Port: int(diff.Port())})
	}
	return q.respond(stun.ClassErrorResponse, attrs...), true
}

// redirectReason reports whether a new allocation would now be refused
// for a reason a redirect answers, and which.
func (q *req) redirectReason() (RedirectReason, bool) {
	switch {
	case q.e.draining.Load():
		return RedirectDraining, true
	case q.e.atCapacity(q.s):
		return RedirectCapacity, true
	}
	return 0, false
}

// refuseCapacity answers an Allocate this engine cannot take for reason:
// 300 to an alternate, or 508 Insufficient Capacity when there is none or
// the request claims a port reserved here (RESERVATION-TOKEN), which no
// other server holds.
func (q *req) refuseCapacity(reason RedirectReason) []byte {
	if !q.m.Contains(stun.AttrReservationToken) {
		if resp, ok := q.redirect(reason); ok {
			return resp
		}
	}
	return q.fail(stun.CodeInsufficientCapacity, nil)
}

// redirectUnsigned redirects an Allocate without MESSAGE-INTEGRITY, before
// the 401 challenge, when the engine cannot take a new allocation and has
// an alternate for the client (see the comment at the top of this file for
// why libwebrtc needs this order). A 5-tuple that has an allocation is
// left to allocate, which answers 437, and so is a request that claims a
// reservation (RESERVATION-TOKEN) or that names a transport other than UDP
// (442 wherever it goes).
func (q *req) redirectUnsigned() ([]byte, bool) {
	if q.m.Type.Method != stun.MethodAllocate || q.m.Contains(stun.AttrMessageIntegrity) ||
		len(q.s.Alternates) == 0 || q.m.Contains(stun.AttrReservationToken) {
		return nil, false
	}
	reason, ok := q.redirectReason()
	alts := q.s.Alternates
	if !ok {
		p := q.e.preferred.Load()
		if p == nil {
			return nil, false
		}
		reason, alts = RedirectImbalance, *p
	}
	if tv, err := q.m.Get(stun.AttrRequestedTransport); err != nil || len(tv) < 1 || tv[0] != protoUDP {
		return nil, false
	}
	if q.e.allocs.get(q.ft) != nil {
		return nil, false
	}
	return q.redirectTo(reason, alts)
}
