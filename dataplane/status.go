package dataplane

import (
	"maps"
	"slices"

	"github.com/tern-gw/tern/dataplane/admin"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
)

// status is the dataplane's state as stunnerd's /status reports it
// (admin.Status), for `stunnerctl status`: the config in force, the live
// allocations, /ready's state and the listeners' and clusters' counters,
// folded as for /metrics. It reads the counters atomically and holds the
// config and listener locks only to copy what it needs, never for the
// packet path; what it allocates is bounded by the config's listeners and
// clusters.
func (s *Server) status() admin.Status {
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	running, total, _ := s.foldListeners()
	all := s.foldAll(&total)
	in := admin.StatusInput{
		Allocations: s.engine.Allocations(),
		Ready:       s.ready.Load(),
		Draining:    s.draining.Load(),
		Offload:     offloadmode.None,
		Listeners:   make(map[string]admin.DirStats, len(running)),
		Clusters:    make(map[string]admin.DirStats, len(cfg.Clusters)),
	}
	if s.offload != nil {
		st := s.offload.Status()
		in.Offload = st.Attached
		in.OffloadInterfaces = slices.Sorted(maps.Keys(st.Interfaces))
	}
	for _, l := range running {
		c := &l.counts.sum
		in.Listeners[l.name] = admin.DirStats{
			Rx: admin.DirStat{Pkts: c.Rx, Bytes: c.RxBytes},
			Tx: admin.DirStat{Pkts: c.Tx, Bytes: c.TxBytes},
		}
	}
	for _, c := range cfg.Clusters {
		cs := all.Cluster(s.clusterIDs.ID(c.Name))
		in.Clusters[c.Name] = admin.DirStats{
			Rx: admin.DirStat{Pkts: cs.Rx, Bytes: cs.RxBytes},
			Tx: admin.DirStat{Pkts: cs.Tx, Bytes: cs.TxBytes},
		}
	}
	return admin.NewStatus(cfg, in)
}
