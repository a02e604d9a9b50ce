package dataplane

import (
	"bytes"
	"io"
	"slices"
	"strconv"

	"github.com/VictoriaMetrics/metrics"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/listener"
	"github.com/tern-gw/tern/dataplane/offload/mirror"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/turn"
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

// writeMetrics writes the dataplane's metrics in Prometheus text format,
// each family with its HELP and TYPE, under the names STUNner's dashboards
// and adopters query (docs/metrics.md).
func (s *Server) writeMetrics(w io.Writer) {
	type named struct {
		name   string
		counts *listenerCounts
	}
	var (
		running []named
		total   listenerCounts // every listener, running or stopped
	)
	s.listenersMu.Lock()
	for name, l := range s.listeners {
		c := foldListener(l)
		if r := s.retired[name]; r != nil {
			c.add(r)
		}
		running = append(running, named{name, c})
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
		kernel := map[string]*stats.Sum{}
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
	slices.SortFunc(running, func(a, b named) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	var relays stats.Sum
	s.relays.FoldStats(&relays)
	all := total.sum
	all.Add(&relays)

	p := &promWriter{w: w}
	p.family("stunner_allocations_active", gauge, "Number of active allocations.")
	p.sample("stunner_allocations_active", "", uint64(s.engine.Allocations()))

	p.family("stunner_listener_packets_total", counter, "Number of datagrams (stream listeners: TURN messages) received from (rx) and sent to (tx) clients at a listener.")
	for _, l := range running {
		p.sample("stunner_listener_packets_total", nameDir(l.name, "rx"), l.counts.sum.Rx)
		p.sample("stunner_listener_packets_total", nameDir(l.name, "tx"), l.counts.sum.Tx)
	}
	p.family("stunner_listener_bytes_total", counter, "Number of bytes received from (rx) and sent to (tx) clients at a listener.")
	for _, l := range running {
		p.sample("stunner_listener_bytes_total", nameDir(l.name, "rx"), l.counts.sum.RxBytes)
		p.sample("stunner_listener_bytes_total", nameDir(l.name, "tx"), l.counts.sum.TxBytes)
	}
	p.family("stunner_listener_connections", gauge, "Number of open client connections at a listener (TURN-UDP: its sockets, as stunnerd counts them).")
	for _, l := range running {
		p.sample("stunner_listener_connections", label("name", l.name), uint64(l.counts.conns.Active))
	}
	p.family("stunner_listener_connections_total", counter, "Number of client connections accepted at a listener (TURN-UDP: sockets opened).")
	for _, l := range running {
		p.sample("stunner_listener_connections_total", label("name", l.name), l.counts.conns.Accepted)
	}

	p.family("stunner_cluster_packets_total", counter, "Number of datagrams received from (rx) and sent to (tx) the peers of a cluster.")
	clusters := s.clusterNames()
	for _, name := range clusters {
		c := all.Cluster(s.clusterIDs.ID(name))
		p.sample("stunner_cluster_packets_total", nameDir(name, "rx"), c.Rx)
		p.sample("stunner_cluster_packets_total", nameDir(name, "tx"), c.Tx)
	}
	p.family("stunner_cluster_bytes_total", counter, "Number of bytes received from (rx) and sent to (tx) the peers of a cluster.")
	for _, name := range clusters {
		c := all.Cluster(s.clusterIDs.ID(name))
		p.sample("stunner_cluster_bytes_total", nameDir(name, "rx"), c.RxBytes)
		p.sample("stunner_cluster_bytes_total", nameDir(name, "tx"), c.TxBytes)
	}

	p.family("stunner_bytes_received_total", counter, "Bytes received from clients on every listener and from peers on relay sockets.")
	p.sample("stunner_bytes_received_total", "", all.RxBytes+all.PeerRxBytes)
	p.family("stunner_bytes_sent_total", counter, "Bytes sent to clients on every listener and to peers from relay sockets.")
	p.sample("stunner_bytes_sent_total", "", all.TxBytes+all.PeerTxBytes)
	p.family("stunner_connections_total", counter, "Client connections accepted on every listener (TURN-UDP: sockets opened), the sum of stunner_listener_connections_total.")
	p.sample("stunner_connections_total", "", total.conns.Accepted)

	p.family("tern_peer_packets_total", counter, "Datagrams received from (rx) and sent to (tx) peers on relay sockets.")
	p.sample("tern_peer_packets_total", label("direction", "rx"), all.PeerRx)
	p.sample("tern_peer_packets_total", label("direction", "tx"), all.PeerTx)
	p.family("tern_peer_bytes_total", counter, "Bytes received from (rx) and sent to (tx) peers on relay sockets.")
	p.sample("tern_peer_bytes_total", label("direction", "rx"), all.PeerRxBytes)
	p.sample("tern_peer_bytes_total", label("direction", "tx"), all.PeerTxBytes)

	p.family("tern_listener_connections", gauge, "Open connections (DTLS: associations) of a TURN-TCP, TURN-TLS or TURN-DTLS listener.")
	for _, l := range running {
		if l.counts.hasConns {
			p.sample("tern_listener_connections", label("name", l.name), uint64(l.counts.conns.Active))
		}
	}
	p.family("tern_listener_connections_refused_total", counter, "Connections closed as soon as they were accepted: over limits.connectionsPerIP (per_ip) or at limits.maxConnections with none to shed (total).")
	for _, l := range running {
		if l.counts.hasConns {
			p.sample("tern_listener_connections_refused_total", label("name", l.name)+`,reason="per_ip"`, l.counts.conns.RefusedPerIP)
			p.sample("tern_listener_connections_refused_total", label("name", l.name)+`,reason="total"`, l.counts.conns.RefusedTotal)
		}
	}
	p.family("tern_listener_connections_closed_total", counter, "Connections closed by ternd for a limit: to make room at limits.maxConnections (shed) or silent past the idle limit (idle).")
	for _, l := range running {
		if l.counts.hasConns {
			p.sample("tern_listener_connections_closed_total", label("name", l.name)+`,reason="shed"`, l.counts.conns.Shed)
			p.sample("tern_listener_connections_closed_total", label("name", l.name)+`,reason="idle"`, l.counts.conns.Idle)
		}
	}

	p.family("tern_dropped_packets_total", counter, "Packets dropped, by reason.")
	for i := 1; i < turn.NumDropReasons; i++ {
		p.sample("tern_dropped_packets_total", label("reason", turn.DropReason(i).String()), all.Drops[i])
	}
	p.family("tern_refused_requests_total", counter, "Requests refused or dropped for policy, by reason.")
	for i := range turn.NumRefusals {
		r := turn.Refusal(i)
		p.sample("tern_refused_requests_total", label("reason", r.String()), s.engine.Refused(r))
	}
	p.family("tern_auth_failures_total", counter, "Requests with MESSAGE-INTEGRITY that failed authentication (answered 401 or 438).")
	p.sample("tern_auth_failures_total", "", s.engine.Refused(turn.RefusedAuth))
	p.family("tern_quota_refusals_total", counter, "Allocate requests refused over a quota: limits.allocationsPerUser (user, 486), limits.allocationsPerIP (ip, 486), limits.maxAllocations (total, 508).")
	p.sample("tern_quota_refusals_total", label("quota", "user"), s.engine.Refused(turn.RefusedQuotaUser))
	p.sample("tern_quota_refusals_total", label("quota", "ip"), s.engine.Refused(turn.RefusedQuotaIP))
	p.sample("tern_quota_refusals_total", label("quota", "total"), s.engine.Refused(turn.RefusedQuotaTotal))
	p.family("tern_allocation_errors_total", counter, "Allocate requests answered with an error, by code (other: a code not listed); the 401 that starts every allocation is not counted.")
	for _, code := range turn.AllocationErrorCodes {
		p.sample("tern_allocation_errors_total", label("code", strconv.Itoa(code)), s.engine.AllocationErrors(code))
	}
	p.sample("tern_allocation_errors_total", label("code", "other"), s.engine.AllocationErrors(0))
	s.writeOffloadMetrics(p)
	p.flush()
}

// writeOffloadMetrics reports the offload engine asked for and the one
// attached (None after an Auto fallback, docs/offload-control.md), the
// paths the kernel relays and the Puts that failed.
func (s *Server) writeOffloadMetrics(p *promWriter) {
	st := mirror.Status{Requested: config.OffloadNone, Attached: config.OffloadNone}
	var kernel stats.Sum
	if s.offload != nil {
		st = s.offload.Status()
		byListener := map[string]*stats.Sum{}
		s.offload.Fold(byListener)
		for _, k := range byListener {
			kernel.Add(k)
		}
	}
	p.family("tern_offload_active", gauge, "1 when the eBPF ChannelData fast path is attached (attached: XDP or TC), 0 when every packet goes through sockets (attached=None: offload off, or requested Auto fell back).")
	v := uint64(0)
	if st.Attached != config.OffloadNone {
		v = 1
	}
	p.sample("tern_offload_active", label("requested", st.Requested)+","+label("attached", st.Attached), v)
	p.family("tern_offload_packets_total", counter, "Datagrams the kernel relayed without a socket, to peers (client_to_peer) and to clients (peer_to_client); they are counted in the listener, cluster and peer series too.")
	p.sample("tern_offload_packets_total", label("direction", "client_to_peer"), kernel.PeerTx)
	p.sample("tern_offload_packets_total", label("direction", "peer_to_client"), kernel.PeerRx)
	p.family("tern_offload_paths", gauge, "Channel bindings the kernel relays.")
	p.sample("tern_offload_paths", "", uint64(st.Paths))
	p.family("tern_offload_put_errors_total", counter, "Channel bindings the kernel could not take (maps full, invalid path); they are relayed through sockets.")
	p.sample("tern_offload_put_errors_total", "", st.PutErrors)
	p.family("tern_offload_passed_packets_total", counter, "Packets of an offloaded channel the kernel left to the socket path (expired path, odd length or padding, too big, no route, forwarding off on the interface) or dropped midway (error).")
	k := st.Kernel
	for _, r := range []struct {
		reason string
		v      uint64
	}{
		{"expired", k.Expired}, {"bad_length", k.BadLength}, {"padding", k.Padding}, {"too_big", k.TooBig},
		{"no_route", k.NoRoute}, {"forwarding_disabled", k.ForwardingDisabled}, {"error", k.Errors},
	} {
		p.sample("tern_offload_passed_packets_total", label("reason", r.reason), r.v)
	}
}

// nameDir is the labels of STUNner's listener and cluster counters.
func nameDir(name, dir string) string { return label("name", name) + `,direction="` + dir + `"` }

// label renders name="value" with the value escaped as the Prometheus text
// format requires (backslash, double quote, newline).
func label(name, value string) string {
	b := make([]byte, 0, len(name)+len(value)+3)
	b = append(b, name...)
	b = append(b, '=', '"')
	for i := 0; i < len(value); i++ {
		switch c := value[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '"':
			b = append(b, `\"`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// promWriter writes the dataplane's families in the Prometheus text format
// (version 0.0.4) into a buffer, which flush hands to the scrape. Each
// sample goes through VictoriaMetrics/metrics' writers
// (metrics.WriteCounterUint64, metrics.WriteGaugeUint64), as the Go and
// process metrics that admin adds after them do. The HELP and TYPE lines
// are written here instead: the library (v1.35.1) has no way to give a
// family its HELP text (metrics.WriteMetadataIfNeeded writes a bare
// "# HELP name"), and with metrics.ExposeMetadata on, which admin turns
// on for the TYPE lines of the process metrics, its writers put that bare
// pair before every sample, a second HELP of a family that Prometheus'
// parser refuses. The samples are therefore written through samplesOnly.
// A metrics.Set does not fit either: its metadata has no text, and these
// values are folded from per-worker counters at each scrape, not kept.
type promWriter struct {
	w       io.Writer
	b       bytes.Buffer
	counter bool // the family being written is a counter, else a gauge
}

// Family types of promWriter.family.
const (
	counter = "counter"
	gauge   = "gauge"
)

// family starts a family: its HELP (help must hold no backslash or
// newline, which the format would need escaped) and TYPE (counter or
// gauge) lines. Its samples follow.
func (p *promWriter) family(name, typ, help string) {
	p.counter = typ == counter
	p.b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}

// sample writes a sample of the current family: labels are label() pairs
// joined by commas, or empty.
func (p *promWriter) sample(name, labels string, v uint64) {
	if labels != "" {
		name += "{" + labels + "}"
	}
	w := samplesOnly{&p.b}
	if p.counter {
		metrics.WriteCounterUint64(w, name, v)
	} else {
		metrics.WriteGaugeUint64(w, name, v)
	}
}

func (p *promWriter) flush() { _, _ = p.w.Write(p.b.Bytes()) }

// samplesOnly passes the library's sample lines on and drops its metadata
// lines, which it writes one per Write call (see promWriter).
type samplesOnly struct{ b *bytes.Buffer }

func (s samplesOnly) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("# ")) {
		return len(p), nil
	}
	return s.b.Write(p)
}
