package dataplane

import (
	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/listener"
)

// refreshAllowlists rebuilds every running listener's allowlist after a
// STRICT_DNS answer changed (the Resolver calls it from its goroutine), and
// drops permissions and channels to addresses the names no longer resolve
// to, as a cluster edit would. Listeners and allocations stay.
func (s *Server) refreshAllowlists() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	cfg := s.cfg
	own := s.ownAddrs(cfg)
	s.listenersMu.Lock()
	ls := make([]listener.Listener, 0, len(s.listeners))
	for _, l := range s.listeners {
		ls = append(ls, l)
	}
	s.listenersMu.Unlock()
	for _, l := range ls {
		al, err := allowlist.Build(l.Spec().Routes, cfg.Clusters, own, s.dns.Lookup, &s.clusterIDs)
		if err != nil {
			// Validation checked the routes, so this is a bug; keep the
			// listener's current allowlist rather than open or shut it.
			s.log.Error("allowlist rebuild after a DNS change failed", "error", err)
			continue
		}
		l.SetAllowlist(al)
	}
	s.engine.Revalidate()
}
