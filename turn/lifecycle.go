package turn

import (
	"log/slog"
	"net/netip"
	"time"
)

// quotaResult says which cap a new allocation would pass, if any.
type quotaResult uint8

const (
	quotaOK    quotaResult = iota
	quotaUser              // AllocationsPerUser: 486
	quotaIP                // AllocationsPerIP: 486
	quotaTotal             // MaxAllocations: 508
)

// quotaAddr is the client address quotas and throttling count by: the IP,
// and for IPv6 its /64, which one subscriber or host holds whole (RFC
// 6177), so that walking a /64 does not multiply the per-IP cap.
func quotaAddr(ip netip.Addr) netip.Addr {
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// reserveQuota counts n slots (an allocation, or an allocation and the
// port its EVEN-PORT reserves) against the caps, all or none, and reports
// which cap would have been passed. user is the USERNAME; the per-user cap
// counts it by quotaUserKey.
func (e *Engine) reserveQuota(s *Settings, user string, ip netip.Addr, n int) quotaResult {
	user = quotaUserKey(user)
	e.quotaMu.Lock()
	defer e.quotaMu.Unlock()
	switch {
	case s.AllocationsPerUser > 0 && e.perUser[user]+n > s.AllocationsPerUser:
		return quotaUser
	case s.AllocationsPerIP > 0 && e.perIP[ip]+n > s.AllocationsPerIP:
		return quotaIP
	case s.MaxAllocations > 0 && e.slots+n > s.MaxAllocations:
		return quotaTotal
	}
	e.perUser[user] += n
	e.perIP[ip] += n
	e.slots += n
	return quotaOK
}

// releaseQuota gives back n slots of user and ip.
func (e *Engine) releaseQuota(user string, ip netip.Addr, n int) {
	e.quotaMu.Lock()
	defer e.quotaMu.Unlock()
	e.releaseQuotaLocked(user, ip, n)
}

func (e *Engine) releaseQuotaLocked(user string, ip netip.Addr, n int) {
	user = quotaUserKey(user)
	if e.perUser[user] -= n; e.perUser[user] <= 0 {
		delete(e.perUser, user)
	}
	if e.perIP[ip] -= n; e.perIP[ip] <= 0 {
		delete(e.perIP, ip)
	}
	e.slots -= n
}

// reservation is a port that an Allocate with EVEN-PORT (R bit) reserved:
// it holds one quota slot of its owner until claimed or expired.
type reservation struct {
	user    string
	ip      netip.Addr // quotaAddr of the client
	expires int64      // unix ns
}

// addReservation records token for user and ip; its quota slot is already
// counted.
func (e *Engine) addReservation(token uint64, user string, ip netip.Addr, now time.Time) {
	e.quotaMu.Lock()
	defer e.quotaMu.Unlock()
	e.reservations[token] = reservation{user: user, ip: ip, expires: now.Add(ReservationLifetime).UnixNano()}
}

// claimReservation removes token's reservation if user and ip made it and
// it has not expired, and reports whether it did. Its quota slot then
// counts for the allocation that claims it. A claim by anyone else leaves
// the reservation to its owner.
func (e *Engine) claimReservation(token uint64, user string, ip netip.Addr, now time.Time) bool {
	e.quotaMu.Lock()
	defer e.quotaMu.Unlock()
	r, ok := e.reservations[token]
	if !ok || r.user != user || r.ip != ip || r.expires <= now.UnixNano() {
		return false
	}
	delete(e.reservations, token)
	return true
}

// sweepReservations frees the quota of reservations nobody claimed in time.
func (e *Engine) sweepReservations(now int64) {
	e.quotaMu.Lock()
	defer e.quotaMu.Unlock()
	for tok, r := range e.reservations {
		if r.expires <= now {
			delete(e.reservations, tok)
			e.releaseQuotaLocked(r.user, r.ip, 1)
		}
	}
}

// deleteAllocation removes a from the table, closes its relay socket and
// frees its quota; a second call for the same allocation does nothing.
func (e *Engine) deleteAllocation(a *Allocation, reason string) {
	e.deleteAllocationAs(a, reason)
}

// deleteAllocationAs is deleteAllocation, logged with reason unless it is
// empty.
func (e *Engine) deleteAllocationAs(a *Allocation, reason string) {
	if !e.allocs.remove(a) {
		return
	}
	// Under mu, so that a ChannelBind or CreatePermission racing with the
	// delete either reports its path and charges its state before the
	// PathDown and refund below, or sees deleted.
	a.mu.Lock()
	a.deleted.Store(true)
	if a.obs != nil {
		a.byPeer.each(a.pathDown)
	}
	a.refund(a.charged)
	a.mu.Unlock()
	for _, r := range a.Relays() {
		if err := r.Close(); err != nil {
			e.log.Warn("closing relay socket", "client", a.FiveTuple.String(), "error", err)
		}
	}
	e.releaseQuota(a.Username, quotaAddr(a.FiveTuple.Client.Addr()), 1)
	if reason != "" && e.logs(slog.LevelInfo) {
		e.log.Info("allocation deleted", "client", a.FiveTuple.String(), "relay", a.relay.Addr().String(), "reason", reason)
	}
}

// Sweep deletes allocations whose lifetime has passed, drops expired
// permissions, channel bindings and EVEN-PORT reservations, and writes the
// aggregated refusal lines when RefusalLogInterval has passed. The
// dataplane calls it about once a second; it returns the number of
// allocations deleted.
func (e *Engine) Sweep() int {
	now := e.now()
	e.sweepReservations(now)
	e.flushRefusals(now)
	n := 0
	e.allocs.each(func(a *Allocation) {
		if a.expires.Load() <= now {
			e.deleteAllocation(a, "expired")
			n++
			return
		}
		a.mu.Lock()
		a.prune(now)
		a.mu.Unlock()
	})
	return n
}

// Revalidate drops the permissions and channel bindings that a transport's
// listener no longer allows, after its routes changed. Allocations stay.
func (e *Engine) Revalidate() {
	now := e.now()
	e.allocs.each(func(a *Allocation) {
		a.mu.Lock()
		a.revoke(a.Transport.PeerCluster, now)
		a.mu.Unlock()
	})
}

// CloseTransport deletes every allocation made over tr (its listener or
// connection has gone) and returns how many.
func (e *Engine) CloseTransport(tr Transport, reason string) int {
	n := 0
	e.allocs.each(func(a *Allocation) {
		if a.Transport == tr {
			e.deleteAllocation(a, reason)
			n++
		}
	})
	return n
}

// ForgetTransport deletes the allocations made through tr without a
// trace on the wire or in the log, after handing each of their relays to
// detach, which must take the relay out of service so that its Close does
// nothing (relay.Pool.Detach). It is for a hand-over (ternd --takeover):
// the successor serves those allocations on the same sockets, and this
// process only stops reading them and gives back what they charged
// (quota slots, the state budget). It returns how many it deleted.
func (e *Engine) ForgetTransport(tr Transport, detach func(Relay)) int {
	n := 0
	e.allocs.each(func(a *Allocation) {
		if a.Transport != tr {
			return
		}
		for _, r := range a.Relays() {
			detach(r)
		}
		e.deleteAllocationAs(a, "")
		n++
	})
	return n
}

// Close deletes every allocation, closing their relay sockets.
func (e *Engine) Close() {
	e.allocs.each(func(a *Allocation) { e.deleteAllocation(a, "shutdown") })
}
