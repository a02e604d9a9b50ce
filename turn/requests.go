package turn

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/pion/stun/v2"
)

// knownAttrs are the comprehension-required attributes the TURN methods
// understand; any other in 0x0000-0x7FFF gets 420 (RFC 8489 §7.3.1).
var knownAttrs = map[stun.AttrType]bool{
	stun.AttrUsername: true, stun.AttrMessageIntegrity: true, stun.AttrRealm: true,
	stun.AttrNonce: true, stun.AttrXORPeerAddress: true, stun.AttrData: true,
	stun.AttrLifetime: true, stun.AttrRequestedTransport: true, stun.AttrDontFragment: true,
	stun.AttrEvenPort: true, stun.AttrReservationToken: true, stun.AttrChannelNumber: true,
	stun.AttrRequestedAddressFamily: true,
}

const protoUDP = 17

// reqState is the decoded request and its answering state, pooled: under
// allocation churn the decoder's attribute list and the req were a fifth of
// the garbage per request. Nothing keeps either past request: a response is
// built in a new buffer and what an allocation keeps of the request
// (transaction ID, username) is copied.
type reqState struct {
	m stun.Message
	q req
}

var reqPool = sync.Pool{New: func() any { return new(reqState) }}

// request answers a STUN request (slow path: it allocates).
func (e *Engine) request(tr Transport, ft FiveTuple, pkt []byte, r *Result) {
	st := reqPool.Get().(*reqState)
	defer func() {
		attrs := st.m.Attributes[:0]
		st.m = stun.Message{Attributes: attrs}
		st.q = req{}
		reqPool.Put(st)
	}()
	m := &st.m
	m.Raw = pkt
	if err := m.Decode(); err != nil {
		r.drop(DropMalformed)
		return
	}
	if m.Contains(stun.AttrFingerprint) && stun.Fingerprint.Check(m) != nil {
		r.drop(DropMalformed)
		return
	}
	if m.Type.Class != stun.ClassRequest {
		r.drop(DropUnexpected)
		return
	}
	rq := &st.q
	*rq = req{e: e, tr: tr, ft: ft, m: m, s: e.settings.Load(), now: e.clock.Now()}
	var resp []byte
	switch m.Type.Method {
	case stun.MethodBinding:
		resp = rq.success(xorAttr{stun.AttrXORMappedAddress, ft.Client})
	case stun.MethodAllocate, stun.MethodRefresh, stun.MethodCreatePermission, stun.MethodChannelBind:
		if rq.s.STUNOnly {
			resp = rq.refuseTURN()
			break
		}
		resp = rq.turn()
	default:
		resp = rq.fail(stun.CodeBadRequest, nil)
	}
	if rq.drop != DropNone {
		r.drop(rq.drop)
		return
	}
	r.Kind, r.Drop, r.Reply, r.Alloc, r.Payload = Reply, DropNone, resp, nil, nil
}

// req is one request being answered.
type req struct {
	e   *Engine
	tr  Transport
	ft  FiveTuple
	m   *stun.Message
	s   *Settings
	now time.Time
	key []byte // set once authenticated: responses carry MESSAGE-INTEGRITY
	usr string
	// drop, when set, says to answer nothing and count the request so.
	drop DropReason
}

// respond encodes a response of class c with attrs, adding
// MESSAGE-INTEGRITY when the request was authenticated and FINGERPRINT when
// the request carried one.
func (q *req) respond(c stun.MessageClass, attrs ...stun.Setter) []byte {
	b := new(respBuf)
	out := &b.m
	out.Raw, out.Attributes = b.raw[:0], b.attrs[:0]
	out.Type = stun.NewType(q.m.Type.Method, c)
	out.TransactionID = q.m.TransactionID
	out.WriteHeader()
	err := error(nil)
	add := func(s stun.Setter) {
		if err == nil {
			err = s.AddTo(out)
		}
	}
	// SOFTWARE only to authenticated clients: anyone can send an
	// unauthenticated request from a spoofed address, and what it gets
	// back is what a reflection attack sends the victim.
	if q.e.software != "" && q.key != nil {
		add(stun.NewSoftware(q.e.software))
	}
	for _, a := range attrs {
		add(a)
	}
	if q.key != nil {
		add(stun.MessageIntegrity(q.key))
	}
	if q.m.Contains(stun.AttrFingerprint) {
		add(stun.Fingerprint)
	}
	if err != nil {
		// Only our own attribute encoders can fail here; answer with a bare 500.
		bare, _ := stun.Build(stun.NewTransactionIDSetter(q.m.TransactionID),
			stun.NewType(q.m.Type.Method, stun.ClassErrorResponse), stun.CodeServerError)
		return bare.Raw
	}
	return out.Raw
}

// respBuf is a response and the room to encode it in one heap object: the
// typical response (header, a few attributes, MESSAGE-INTEGRITY,
// FINGERPRINT) fits, so building it does not grow anything. Larger ones
// grow as usual.
type respBuf struct {
	m     stun.Message
	attrs [8]stun.RawAttribute
	raw   [176]byte
}

func (q *req) success(attrs ...stun.Setter) []byte {
	return q.respond(stun.ClassSuccessResponse, attrs...)
}

func (q *req) fail(code stun.ErrorCode, extra []stun.Setter) []byte {
	q.countAllocError(code)
	if code != stun.CodeUnauthorized && q.e.logs(slog.LevelDebug) {
		q.e.log.Debug("request refused", "client", q.ft.String(), "method", q.m.Type.Method.String(), "code", int(code))
	}
	// Reason phrases are for diagnostics (RFC 8489 §14.8) and may be
	// empty; an unauthenticated request gets the bare code, for size.
	var ec stun.Setter = code
	if q.key == nil {
		ec = &stun.ErrorCodeAttribute{Code: code}
	}
	return q.respond(stun.ClassErrorResponse, append([]stun.Setter{ec}, extra...)...)
}

// refuseTURN answers a TURN request (Allocate, Refresh, CreatePermission,
// ChannelBind) under Settings.STUNOnly with 403 Forbidden, before any
// authentication: STUN-only mode needs no credentials (STUNner's stunMode
// makes them optional) and makes no allocation. 403 is RFC 8656's answer
// to a request the server's policy forbids. An error response ends the
// client's transaction at once, where silence would have it retransmit
// for 39.5 s (RFC 8489 §6.2.1); pion/turn, libwebrtc and coturn's client
// report a 403 Allocate as a failed allocation and do not retry it. 400
// would say the request was malformed, which it is not, and 420 would name
// an attribute the server does not understand. The code goes bare, like
// every unauthenticated error, so the answer is no larger than the request.
func (q *req) refuseTURN() []byte {
	return q.fail(stun.CodeForbidden, nil)
}

// challenge answers 401 or 438 with a fresh NONCE and the REALM, and no
// MESSAGE-INTEGRITY (RFC 8489 §9.2.4).
func (q *req) challenge(code stun.ErrorCode) []byte {
	q.key = nil
	return q.fail(code, []stun.Setter{
		stun.NewRealm(q.s.Realm),
		stun.NewNonce(q.e.nonces.make(q.now, q.ft.Client.Addr())),
	})
}

// authenticate checks the long-term credentials of RFC 8489 §9.2.4. It
// returns the error response to send, or nil when the request is
// authenticated (q.key and q.usr are then set).
func (q *req) authenticate() []byte {
	if !q.m.Contains(stun.AttrMessageIntegrity) {
		return q.challenge(stun.CodeUnauthorized)
	}
	var (
		user  stun.Username
		realm stun.Realm
		nonce stun.Nonce
	)
	if user.GetFrom(q.m) != nil || realm.GetFrom(q.m) != nil || nonce.GetFrom(q.m) != nil {
		return q.fail(stun.CodeBadRequest, nil)
	}
	// The nonce comes first, and costs the source nothing when it fails: a
	// request's source address can be forged, and a nonce can only be
	// presented by someone who received it at that address (the nonce's
	// HMAC binds the client IP; nonceMaker). A forged, malformed or other
	// address's nonce gets 438 and a nonce for this address, as RFC 8489
	// §9.2.4 asks, so a client whose NAT mapping moved to a new IP
	// recovers with one round trip (RFC 8656 §7.2 allows the new
	// 5-tuple's Allocate). Charging it would let anyone who forges a
	// victim's address drain the victim's bucket.
	switch q.e.nonces.check(string(nonce), q.now, q.ft.Client.Addr(), q.s.NonceLifetime) {
	case nonceInvalid:
		q.e.refused(RefusedAuth, q.ft)
		return q.challenge(stun.CodeStaleNonce)
	case nonceExpired:
		// Not a failure either: the nonce's MAC shows this engine gave it to this address,
		// which every client's nonce comes to once per lifetime. Taking a token here would
		// let the clients behind one NAT address (up to the per-address quota of them)
		// throttle each other whenever their nonces expire together. It reveals nothing
		// about the password, which is checked only with a live nonce.
		return q.challenge(stun.CodeStaleNonce)
	}
	// The throttle comes before the password is checked, so that a source
	// over its failures learns nothing, not even that a guess was right.
	src := quotaAddr(q.ft.Client.Addr())
	burst, rate := float64(q.s.AuthFailureBurst), q.s.AuthFailureRate
	if rate <= 0 {
		burst = 0 // a bucket that never refills would lock a source out for good
	}
	now := q.now.UnixNano()
	srcKey, usrKey := keyOfAddr(src, 0), userKey(string(user))
	if burst > 0 && !q.e.budgetsAllow(src, srcKey, usrKey, string(user), now, burst, rate) {
		q.e.refused(RefusedThrottled, q.ft)
		q.drop = DropThrottled
		return []byte{}
	}
	// Only a failed MESSAGE-INTEGRITY (or unknown user or wrong realm)
	// under a live nonce issued to this address costs a token: it took a
	// round trip from that address to get one.
	failed := func(code stun.ErrorCode) []byte {
		q.e.refused(RefusedAuth, q.ft)
		if burst > 0 {
			q.e.throttle.fail(srcKey, now, burst, rate)
			q.e.userFailures.fail(usrKey, now, burst*userFailureScale, rate*userFailureScale)
			q.e.totalFailures.fail(now, burst*totalFailureScale, rate*totalFailureScale)
		}
		return q.challenge(code)
	}
	key, ok := q.s.Auth.Key(string(user), q.s.Realm, q.now)
	if !ok || string(realm) != q.s.Realm || stun.MessageIntegrity(key).Check(q.m) != nil {
		if q.e.logs(slog.LevelDebug) {
			q.e.log.Debug("authentication failed", "client", q.ft.String(), "username", string(user))
		}
		return failed(stun.CodeUnauthorized)
	}
	q.key, q.usr = key, string(user)
	if burst > 0 {
		q.e.trustedSrc.add(sourceUserKey(src, q.usr), now)
	}
	q.m.Attributes = signedPart(q.m.Attributes)
	return nil
}

// signedPart returns the attributes up to and including the first
// MESSAGE-INTEGRITY, plus a MESSAGE-INTEGRITY-SHA256 or FINGERPRINT after
// it. RFC 8489 §14.5: the HMAC covers only what precedes MESSAGE-INTEGRITY,
// so anyone on the path can append attributes after it, and the receiver
// ignores them. Every later read of the request (m.Get, the peer list, the
// unknown-attribute check) sees this slice, so nothing appended is acted on.
// It truncates attrs in place (no allocation); the integrity check, which
// needs the attributes after MESSAGE-INTEGRITY to find the length the HMAC
// was computed over, must already have run.
func signedPart(attrs []stun.RawAttribute) []stun.RawAttribute {
	for i, a := range attrs {
		if a.Type != stun.AttrMessageIntegrity {
			continue
		}
		n := i + 1
		for _, b := range attrs[i+1:] {
			if b.Type == stun.AttrMessageIntegritySHA256 || b.Type == stun.AttrFingerprint {
				attrs[n] = b
				n++
			}
		}
		return attrs[:n]
	}
	return attrs
}

// unknownAttrs returns the comprehension-required attributes not understood.
func (q *req) unknownAttrs() []stun.AttrType {
	var unknown []stun.AttrType
	for _, a := range q.m.Attributes {
		if a.Type.Required() && !knownAttrs[a.Type] {
			unknown = append(unknown, a.Type)
		}
	}
	return unknown
}

// turn authenticates and dispatches the TURN methods.
func (q *req) turn() []byte {
	if resp, ok := q.redirectUnsigned(); ok {
		return resp
	}
	if resp := q.authenticate(); resp != nil {
		return resp
	}
	if u := q.unknownAttrs(); len(u) > 0 {
		return q.fail(stun.CodeUnknownAttribute, []stun.Setter{stun.UnknownAttributes(u)})
	}
	if q.m.Type.Method == stun.MethodAllocate {
		return q.allocate()
	}
	a := q.e.allocs.get(q.ft)
	if a == nil || a.deleted.Load() {
		return q.fail(stun.CodeAllocMismatch, nil)
	}
	if a.Username != q.usr {
		return q.fail(stun.CodeWrongCredentials, nil)
	}
	switch q.m.Type.Method {
	case stun.MethodRefresh:
		return q.refresh(a)
	case stun.MethodCreatePermission:
		return q.createPermission(a)
	default:
		return q.channelBind(a)
	}
}

// lifetime computes the lifetime to grant (RFC 8656 §7.2 step 9 and §8):
// the default unless the client asked for more, clamped to MaxLifetime.
func (q *req) lifetime() time.Duration {
	def := min(DefaultLifetime, q.s.MaxLifetime)
	v, err := q.m.Get(stun.AttrLifetime)
	if err != nil || len(v) != 4 {
		return def
	}
	asked := time.Duration(binary.BigEndian.Uint32(v)) * time.Second
	if asked > def {
		return min(asked, q.s.MaxLifetime)
	}
	return def
}

func lifetimeAttr(d time.Duration) stun.RawAttribute {
	v := make([]byte, 4)
	binary.BigEndian.PutUint32(v, uint32(d/time.Second))
	return stun.RawAttribute{Type: stun.AttrLifetime, Value: v}
}

// allocate handles Allocate (RFC 8656 §7.2).
func (q *req) allocate() []byte {
	e := q.e
	if a := e.allocs.get(q.ft); a != nil {
		// A retransmitted Allocate gets the original success response again;
		// anything else on a 5-tuple that has an allocation is a mismatch.
		if a.lastTxID == q.m.TransactionID && a.Username == q.usr {
			return q.allocated(a)
		}
		return q.fail(stun.CodeAllocMismatch, nil)
	}
	if e.draining.Load() {
		return q.refuseCapacity(RedirectDraining)
	}
	tv, err := q.m.Get(stun.AttrRequestedTransport)
	if err != nil || len(tv) < 1 {
		return q.fail(stun.CodeBadRequest, nil)
	}
	if tv[0] != protoUDP {
		return q.fail(stun.CodeUnsupportedTransProto, nil)
	}
	rr := RelayRequest{Client: q.ft, Username: q.usr, DontFragment: q.m.Contains(stun.AttrDontFragment)}
	if v, err := q.m.Get(stun.AttrReservationToken); err == nil {
		if len(v) != 8 || q.m.Contains(stun.AttrEvenPort) || q.m.Contains(stun.AttrRequestedAddressFamily) ||
			q.m.Contains(attrAdditionalAddressFamily) || q.m.Contains(attrAdditionalAddressFamilyDraft) {
			return q.fail(stun.CodeBadRequest, nil)
		}
		rr.Token = binary.BigEndian.Uint64(v)
		if rr.Token == 0 {
			return q.fail(stun.CodeInsufficientCapacity, nil)
		}
	}
	if v, err := q.m.Get(stun.AttrEvenPort); err == nil {
		if len(v) < 1 {
			return q.fail(stun.CodeBadRequest, nil)
		}
		rr.EvenPort, rr.ReservePair = true, v[0]&0x80 != 0
	}
	additional, resp := q.addressFamilies(&rr)
	if resp != nil {
		return resp
	}
	// The state budget is charged first, and given back on every way out
	// that makes no allocation.
	cost := AllocationCost + e.relayCost
	if additional {
		cost += e.relayCost
	}
	if !e.state.take(cost) {
		e.refused(RefusedStateAllocate, q.ft)
		return q.refuseCapacity(RedirectCapacity)
	}
	charged := true
	defer func() {
		if charged {
			e.state.give(cost)
		}
	}()
	clientIP := quotaAddr(q.ft.Client.Addr())
	slots := 1 // quota slots this request holds: 2 while it reserves a pair
	if rr.Token != 0 {
		// The reservation's slot becomes the allocation's. Anyone but its
		// owner (client address and USERNAME) is told the token is unknown.
		if !e.claimReservation(rr.Token, q.usr, clientIP, q.now) {
			return q.fail(stun.CodeInsufficientCapacity, nil)
		}
	} else {
		if rr.ReservePair {
			slots = 2
		}
		if res := e.reserveQuota(q.s, q.usr, clientIP, slots); res != quotaOK {
			e.refused(res.refusal(), q.ft)
			if res == quotaTotal {
				return q.refuseCapacity(RedirectCapacity)
			}
			return q.fail(stun.CodeAllocQuotaReached, nil)
		}
	}
	a := &Allocation{FiveTuple: q.ft, Transport: q.tr, Username: q.usr, lastTxID: q.m.TransactionID,
		state: &e.state}
	if q.ft.Proto == ProtoUDP {
		a.obs = e.paths
	}
	relay, token, err := e.relays.Allocate(a, rr)
	if err != nil {
		e.releaseQuota(q.usr, clientIP, slots)
		switch {
		case errors.Is(err, ErrAddressFamily):
			return q.fail(stun.CodeAddrFamilyNotSupported, nil)
		case errors.Is(err, ErrDontFragment):
			return q.fail(stun.CodeUnknownAttribute, []stun.Setter{stun.UnknownAttributes{stun.AttrDontFragment}})
		}
		e.refused(RefusedRelay, q.ft)
		if e.logs(slog.LevelDebug) {
			e.log.Debug("relay allocation failed", "client", q.ft.String(), "error", err)
		}
		return q.refuseCapacity(RedirectCapacity)
	}
	if slots == 2 {
		if token != 0 {
			e.addReservation(token, q.usr, clientIP, q.now)
		} else {
			e.releaseQuota(q.usr, clientIP, 1)
		}
		slots = 1
	}
	var extra Relay
	var extraErr stun.ErrorCode
	if additional {
		// RFC 8656 §7.2: the IPv4 relay is made; the IPv6 one is tried
		// and, if there is no port for it, the success response says so
		// in ADDRESS-ERROR-CODE instead of failing the allocation.
		extra, _, err = e.relays.Allocate(a, RelayRequest{Client: q.ft, Username: q.usr, IPv6: true, DontFragment: rr.DontFragment})
		switch {
		case errors.Is(err, ErrAddressFamily):
			// No IPv6 relay address: the request is refused whole. A
			// port EVEN-PORT reserved stays reserved, holding its quota
			// slot, until claimed or swept.
			_ = relay.Close()
			e.releaseQuota(q.usr, clientIP, 1)
			return q.fail(stun.CodeAddrFamilyNotSupported, nil)
		case err != nil:
			extraErr = stun.CodeInsufficientCapacity
			e.state.give(e.relayCost) // no second relay socket to hold
			cost -= e.relayCost
		}
	}
	a.setRelays(relay, extra)
	// Set before the allocation is visible, so that a delete racing with
	// the insert below gives back exactly this.
	a.charged = cost
	a.token = token
	a.extraErr = extraErr
	lt := q.lifetime()
	a.expires.Store(q.now.Add(lt).UnixNano())
	if existing := e.allocs.insert(a); existing != nil {
		// Lost a race with a retransmission handled by another worker.
		for _, r := range a.Relays() {
			_ = r.Close()
		}
		e.releaseQuota(q.usr, clientIP, 1)
		if existing.lastTxID == q.m.TransactionID {
			return q.allocated(existing)
		}
		return q.fail(stun.CodeAllocMismatch, nil)
	}
	charged = false // the allocation holds it now: deleteAllocation gives it back
	if e.logs(slog.LevelInfo) {
		relays := relay.Addr().String()
		if extra != nil {
			relays += "," + extra.Addr().String()
		}
		e.log.Info("allocation created", "client", q.ft.String(), "relay", relays,
			"username", q.usr, "lifetime", lt.String())
	}
	return q.allocated(a)
}

// allocated is the success response to the Allocate that made a, built
// again for each retransmission of that request (RFC 8656 §7.2) rather than
// kept: the same attributes, with the lifetime that remains.
func (q *req) allocated(a *Allocation) []byte {
	lt := max(time.Unix(0, a.expires.Load()).Sub(q.now), 0)
	attrs := []stun.Setter{xorAttr{stun.AttrXORRelayedAddress, a.relay.Addr()}}
	for _, r := range a.relays {
		// A dual allocation's second relayed transport address (RFC 8656
		// §7.2): XOR-RELAYED-ADDRESS twice, IPv4 first.
		if r != nil && r != a.relay {
			attrs = append(attrs, xorAttr{stun.AttrXORRelayedAddress, r.Addr()})
		}
	}
	if a.extraErr != 0 {
		// Retransmissions carry the same attributes, so the code point
		// the client used is read from the request.
		draft := q.m.Contains(attrAdditionalAddressFamilyDraft) && !q.m.Contains(attrAdditionalAddressFamily)
		attrs = append(attrs, addressErrorCode{family: familyIPv6, code: a.extraErr, draft: draft})
	}
	attrs = append(attrs, lifetimeAttr(lt))
	if a.token != 0 {
		v := make([]byte, 8)
		binary.BigEndian.PutUint64(v, a.token)
		attrs = append(attrs, stun.RawAttribute{Type: stun.AttrReservationToken, Value: v})
	}
	attrs = append(attrs, xorAttr{stun.AttrXORMappedAddress, q.ft.Client})
	return q.success(attrs...)
}

// refresh handles Refresh (RFC 8656 §8): lifetime 0 deletes.
func (q *req) refresh(a *Allocation) []byte {
	v, err := q.m.Get(stun.AttrLifetime)
	if err == nil && len(v) == 4 && binary.BigEndian.Uint32(v) == 0 {
		q.e.deleteAllocation(a, "refreshed to 0")
		return q.success(lifetimeAttr(0))
	}
	lt := q.lifetime()
	if a.obs != nil {
		a.mu.Lock()
		a.expires.Store(q.now.Add(lt).UnixNano())
		a.syncPaths(q.now.UnixNano())
		a.mu.Unlock()
	} else {
		a.expires.Store(q.now.Add(lt).UnixNano())
	}
	return q.success(lifetimeAttr(lt))
}

// peerAddrs returns the XOR-PEER-ADDRESS values of the request.
func (q *req) peerAddrs() ([]netip.AddrPort, bool) {
	var peers []netip.AddrPort
	for _, at := range q.m.Attributes {
		if at.Type != stun.AttrXORPeerAddress {
			continue
		}
		p, ok := parseXORAddr(at.Value, q.m.TransactionID[:])
		if !ok {
			return nil, false
		}
		peers = append(peers, p)
	}
	return peers, len(peers) > 0
}

// sameFamily reports whether peer can be reached from one of a's relayed
// transport addresses: otherwise CreatePermission and ChannelBind answer
// 443 Peer Address Family Mismatch (RFC 8656 §9.2, §11.2).
func sameFamily(a *Allocation, peer netip.AddrPort) bool {
	return a.RelayFor(peer.Addr()) != nil
}

// createPermission handles CreatePermission (RFC 8656 §9.2): all peers are
// installed, or none.
func (q *req) createPermission(a *Allocation) []byte {
	peers, ok := q.peerAddrs()
	if !ok {
		return q.fail(stun.CodeBadRequest, nil)
	}
	clusters := make([]uint32, len(peers))
	for i, p := range peers {
		if !sameFamily(a, p) {
			return q.fail(stun.CodePeerAddrFamilyMismatch, nil)
		}
		// A permission is per IP (RFC 8656 §9): port 0 asks whether any
		// port of the IP is allowed.
		var ok bool
		if clusters[i], ok = q.tr.PeerCluster(netip.AddrPortFrom(p.Addr().Unmap(), 0)); !ok {
			q.e.refused(RefusedPermission, q.ft)
			if q.e.logs(slog.LevelDebug) {
				q.e.log.Debug("permission refused: peer not allowed", "client", q.ft.String(), "peer", p.Addr().String())
			}
			return q.fail(stun.CodeForbidden, nil)
		}
	}
	ips := make([]netip.Addr, len(peers))
	for i, p := range peers {
		ips[i] = p.Addr().Unmap()
	}
	exp := q.now.Add(PermissionLifetime).UnixNano()
	a.mu.Lock()
	fresh := a.newPermissions(ips...)
	room := a.perms.n+fresh <= MaxPermissions
	budget := room && a.charge(int64(fresh)*PermissionCost)
	if budget {
		for i, ip := range ips {
			a.addPermission(ip, exp, clusters[i])
		}
		if a.obs != nil {
			a.syncPaths(q.now.UnixNano())
		}
	}
	a.mu.Unlock()
	if !budget {
		if room {
			q.e.refused(RefusedStatePermission, q.ft)
		}
		return q.fail(stun.CodeInsufficientCapacity, nil)
	}
	return q.success()
}

// channelBind handles ChannelBind (RFC 8656 §11.2).
func (q *req) channelBind(a *Allocation) []byte {
	v, err := q.m.Get(stun.AttrChannelNumber)
	peers, ok := q.peerAddrs()
	if err != nil || len(v) < 2 || !ok || len(peers) != 1 {
		q.e.log.Debug("channel bind: missing or repeated attribute", "client", q.ft.String())
		return q.fail(stun.CodeBadRequest, nil)
	}
	num := binary.BigEndian.Uint16(v)
	top := uint16(maxChannelNumber)
	if q.s.StrictChannelNumbers {
		top = maxStrictChannelNumber
	}
	if num < minChannelNumber || num > top {
		return q.fail(stun.CodeBadRequest, nil)
	}
	peer := netip.AddrPortFrom(peers[0].Addr().Unmap(), peers[0].Port())
	if !sameFamily(a, peer) {
		return q.fail(stun.CodePeerAddrFamilyMismatch, nil)
	}
	cluster, allowed := q.tr.PeerCluster(peer)
	if !allowed {
		q.e.refused(RefusedChannel, q.ft)
		if q.e.logs(slog.LevelDebug) {
			q.e.log.Debug("channel bind refused: peer not allowed", "client", q.ft.String(), "peer", peer.String())
		}
		return q.fail(stun.CodeForbidden, nil)
	}
	a.mu.Lock()
	res := a.bindChannel(num, peer, q.now.UnixNano(), q.now.Add(ChannelLifetime).UnixNano(), q.now.Add(PermissionLifetime).UnixNano(), cluster)
	a.mu.Unlock()
	switch res {
	case conflict:
		q.e.log.Debug("channel bind: number or peer already bound", "client", q.ft.String(), "channel", num, "peer", peer.String())
		return q.fail(stun.CodeBadRequest, nil)
	case full:
		return q.fail(stun.CodeInsufficientCapacity, nil)
	case overBudget:
		q.e.refused(RefusedStateChannel, q.ft)
		return q.fail(stun.CodeInsufficientCapacity, nil)
	}
	return q.success()
}

// xorAttr encodes an XOR address attribute of any type from a netip.AddrPort.
type xorAttr struct {
	t  stun.AttrType
	ap netip.AddrPort
}

func (x xorAttr) AddTo(m *stun.Message) error {
	v := make([]byte, 20)
	n := putXORAddr(v, x.ap, m.TransactionID[:])
	m.Add(x.t, v[:n])
	return nil
}
