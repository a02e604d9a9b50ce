package dataplane

import (
	"bytes"
	"io"
	"slices"
	"strings"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	"github.com/tern-gw/tern/dataplane/listener"
	"github.com/tern-gw/tern/dataplane/promtext"
	"github.com/tern-gw/tern/dataplane/stats"
)

// listenerCounts are a listener's counters folded at one scrape: packets
// and bytes, and connections.
type listenerCounts struct {
	sum   stats.Sum
	conns listener.ConnStats
	// hasConns is false for TURN-UDP listeners, whose ConnStats are sockets.
	hasConns bool
}

// add adds o's counters to c. Active, a gauge, is not carried over from
// stopped listeners.
func (c *listenerCounts) add(o *listenerCounts) {
	c.sum.Add(&o.sum)
	c.conns.Accepted += o.conns.Accepted
	c.conns.RefusedPerIP += o.conns.RefusedPerIP
	c.conns.RefusedTotal += o.conns.RefusedTotal
	c.conns.Shed += o.conns.Shed
	c.conns.Idle += o.conns.Idle
	c.conns.Frame += o.conns.Frame
	c.conns.Unverified += o.conns.Unverified
	c.conns.Routed.TURN += o.conns.Routed.TURN
	c.conns.Routed.Upstream += o.conns.Routed.Upstream
	c.conns.Routed.BadHello += o.conns.Routed.BadHello
	c.conns.Routed.Unreachable += o.conns.Routed.Unreachable
}

func foldListener(l listener.Listener) *listenerCounts {
	c := &listenerCounts{}
	l.FoldStats(&c.sum)
	c.conns, c.hasConns = l.ConnStats()
	return c
}

// retireLocked keeps the final counters of a stopped listener, so that its
// name's counters (and the totals) carry on from them when a listener of
// that name starts again: counters never go backwards across a reload. The
// caller holds listenersMu.
func (s *Server) retireLocked(name string, l listener.Listener) {
	c := foldListener(l)
	if r := s.retired[name]; r != nil {
		r.add(c)
		return
	}
	c.conns.Active = 0
	s.retired[name] = c
}

// namedCounts are a running listener's counters by its name.
type namedCounts struct {
	name   string
	counts *listenerCounts
}

// foldListeners folds the counters of the running listeners (carrying on
// from a stopped one of the same name, with what the kernel fast path
// relayed for them), sorted by name, and of every listener, running or
// stopped, into total. kernel is the fast path's share by listener, nil
// without offload.
func (s *Server) foldListeners() (running []namedCounts, total listenerCounts, kernel map[string]*stats.Sum) {
	s.listenersMu.Lock()
	for name, l := range s.listeners {
		c := foldListener(l)
		if r := s.retired[name]; r != nil {
			c.add(r)
		}
		running = append(running, namedCounts{name, c})
		total.add(c)
	}
	for name, r := range s.retired {
		if _, ok := s.listeners[name]; !ok {
			total.add(r)
		}
	}
	s.listenersMu.Unlock()
	if s.offload != nil {
		// What the kernel relayed counts as if the sockets had.
		kernel = map[string]*stats.Sum{}
		s.offload.Fold(kernel)
		for i := range running {
			if k := kernel[running[i].name]; k != nil {
				running[i].counts.sum.Add(k)
			}
		}
		for _, k := range kernel {
			total.sum.Add(k)
		}
	}
	slices.SortFunc(running, func(a, b namedCounts) int { return strings.Compare(a.name, b.name) })
	return running, total, kernel
}

// foldAll is total's counters with the relay workers' added: every
// listener's, cluster's and peer's counters.
func (s *Server) foldAll(total *listenerCounts) stats.Sum {
	var relays stats.Sum
	s.relays.FoldStats(&relays)
	all := total.sum
	all.Add(&relays)
	return all
}

// writeMetrics folds the dataplane's counters (dataplane/stats, per
// worker), the kernel's (dataplane/offload/mirror) and the engine's into a
// promtext.Snapshot and writes it in Prometheus text format: each family
// with its HELP and TYPE, under the names STUNner's dashboards and
// adopters query (docs/metrics.md).
func (s *Server) writeMetrics(w io.Writer) {
	running, total, kernel := s.foldListeners()
	snap := promtext.Snapshot{Engine: s.engine, Offload: promtext.Offload{Requested: offloadmode.None, Attached: offloadmode.None}}
	if s.offload != nil {
		for _, k := range kernel {
			snap.Offload.Relayed.Add(k)
		}
		st := s.offload.Status()
		snap.Offload.Requested, snap.Offload.Attached = st.Requested, st.Attached
		snap.Offload.Paths, snap.Offload.PutErrors, snap.Offload.Kernel = st.Paths, st.PutErrors, st.Kernel
		snap.Offload.Interfaces, snap.Offload.Reason = st.Interfaces, st.Reason
	}
	for _, l := range running {
		c := l.counts.conns
		snap.Listeners = append(snap.Listeners, promtext.Listener{Name: l.name, Sum: l.counts.sum, Connections: l.counts.hasConns,
			Conns: promtext.Conns{Active: c.Active, Accepted: c.Accepted, RefusedPerIP: c.RefusedPerIP, RefusedTotal: c.RefusedTotal, Shed: c.Shed, Idle: c.Idle, Frame: c.Frame,
				RoutedTURN: c.Routed.TURN, RoutedUpstream: c.Routed.Upstream, BadHello: c.Routed.BadHello, Unreachable: c.Routed.Unreachable,
				Unverified: c.Unverified},
			Upstream: c.HasUpstream})
	}
	snap.All = s.foldAll(&total)
	snap.Accepted = total.conns.Accepted
	for _, name := range s.clusterNames() {
		snap.Clusters = append(snap.Clusters, promtext.Cluster{Name: name, ClusterSum: snap.All.Cluster(s.clusterIDs.ID(name))})
	}
	snap.ConfigsRejected = s.configsRejected.Load()
	s.listenersMu.Lock()
	carried := s.carried
	s.listenersMu.Unlock()
	if len(carried) == 0 {
		promtext.Write(w, &snap)
		return
	}
	var buf bytes.Buffer
	promtext.Write(&buf, &snap)
	addCarried(w, buf.Bytes(), carried)
}

// ConfigRejected counts a config that ternd refused and did not apply, the
// running config staying (tern_configs_rejected_total): one from a config
// discovery service that did not load or whose reconfiguration failed.
func (s *Server) ConfigRejected() { s.configsRejected.Add(1) }
