package turn

import (
	"log/slog"
	"net/netip"
)

// reserveQuota counts a new allocation against the per-user and per-IP
// caps and reports whether both had room.
func (e *Engine) reserveQuota(s *Settings, user string, ip netip.Addr) bool {
	e.quotaMu.Lock()
	defer e.quotaMu.Unlock()
	if s.AllocationsPerUser > 0 && e.perUser[user] >= s.AllocationsPerUser {
		return false
	}
	if s.AllocationsPerIP > 0 && e.perIP[ip] >= s.AllocationsPerIP {
		return false
	}
	e.perUser[user]++
	e.perIP[ip]++
	return true
}

func (e *Engine) releaseQuota(user string, ip netip.Addr) {
	e.quotaMu.Lock()
	defer e.quotaMu.Unlock()
	if e.perUser[user]--; e.perUser[user] <= 0 {
		delete(e.perUser, user)
	}
	if e.perIP[ip]--; e.perIP[ip] <= 0 {
		delete(e.perIP, ip)
	}
}

// deleteAllocation removes a from the table, closes its relay socket and
// frees its quota; a second call for the same allocation does nothing.
func (e *Engine) deleteAllocation(a *Allocation, reason string) {
	if !e.allocs.remove(a) {
		return
	}
	a.deleted.Store(true)
	if err := a.relay.Close(); err != nil {
		e.log.Warn("closing relay socket", "client", a.FiveTuple.String(), "error", err)
	}
	e.releaseQuota(a.Username, a.FiveTuple.Client.Addr().Unmap())
	if e.logs(slog.LevelInfo) {
		e.log.Info("allocation deleted", "client", a.FiveTuple.String(), "relay", a.relay.Addr().String(), "reason", reason)
	}
}

// Sweep deletes allocations whose lifetime has passed and drops expired
// permissions and channel bindings. The dataplane calls it about once a
// second; it returns the number of allocations deleted.
func (e *Engine) Sweep() int {
	now := e.now()
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
	e.allocs.each(func(a *Allocation) {
		a.mu.Lock()
		a.revoke(a.Transport.PeerAllowed)
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

// Close deletes every allocation, closing their relay sockets.
func (e *Engine) Close() {
	e.allocs.each(func(a *Allocation) { e.deleteAllocation(a, "shutdown") })
}
