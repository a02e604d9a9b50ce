package promtext

import (
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/tern-gw/tern/dataplane/offload"
	"github.com/tern-gw/tern/dataplane/stats"
	"github.com/tern-gw/tern/turn"
)

// Engine is what the families read of the TURN engine (*turn.Engine).
type Engine interface {
	// Allocations returns the number of live allocations.
	Allocations() int
	// Refused returns how many requests were refused or dropped for r.
	Refused(r turn.Refusal) uint64
	// AllocationErrors returns how many Allocate requests were answered
	// with error code (0: a code not in turn.AllocationErrorCodes).
	AllocationErrors(code int) uint64
	// StateBytes returns the bytes of allocations, permissions and channel
	// bindings charged against the state budget.
	StateBytes() int64
	// StateBudget returns the state budget in force, bytes; 0 is none.
	StateBudget() int64
	// Redirects returns how many Allocate requests were answered with 300
	// Try Alternate for reason.
	Redirects(reason turn.RedirectReason) uint64
}

// Snapshot is what one scrape reports: the dataplane's per-worker
// counters, folded at the scrape, with what the kernel relayed added where
// the socket path would have counted it.
type Snapshot struct {
	Engine Engine
	// Listeners are the running listeners, sorted by name, each carrying
	// on from the counters of stopped listeners of its name.
	Listeners []Listener
	// Clusters are the clusters of the config in force, in its order, with
	// their counters.
	Clusters []Cluster
	// All is the fold of every listener, running or stopped, of the relay
	// sockets and of the kernel: the byte, peer and drop families.
	All stats.Sum
	// Accepted counts the connections (TURN-UDP: sockets) accepted on
	// every listener, running or stopped.
	Accepted uint64
	// Offload is the kernel fast path's state and counts.
	Offload Offload
	// ConfigsRejected counts the configs ternd refused, keeping the one
	// running (Server.ConfigRejected).
	ConfigsRejected uint64
}

// Listener is one running listener's counters.
type Listener struct {
	Name string
	// Sum holds its packets and bytes to and from clients.
	Sum stats.Sum
	// Conns are its connection counts (TURN-UDP: sockets).
	Conns Conns
	// Connections is true for TURN-TCP, TURN-TLS and TURN-DTLS listeners,
	// whose Conns are connections (associations), reported in the
	// tern_listener_connections families too.
	Connections bool
	// Upstream is true for a TURN-TLS listener with an upstream, whose
	// Conns' routing counts are reported in tern_listener_tls_routed_total.
	Upstream bool
}

// Conns are a listener's connection counts.
type Conns struct {
	// Active is a gauge: the connections open now.
	Active int
	// Accepted counts the connections admitted.
	Accepted uint64
	// RefusedPerIP and RefusedTotal count connections closed at accept,
	// over limits.connectionsPerIP and at limits.maxConnections.
	RefusedPerIP, RefusedTotal uint64
	// Shed counts connections closed to make room, Idle those closed for
	// staying silent past the idle limit.
	Shed, Idle uint64
	// Frame counts TURN-TCP and TURN-TLS connections closed for a frame
	// not completed within limits.partialFrameTimeout, or whose buffer
	// the frame-buffer budget could not hold.
	Frame uint64
	// Unverified counts TURN-DTLS associations closed before their
	// client returned the HelloVerifyRequest's cookie.
	Unverified uint64
	// RoutedTURN, RoutedUpstream, BadHello and Unreachable count a
	// TURN-TLS listener's connections by where their ClientHello sent them:
	// TURN-TLS, the upstream, closed for a bad or slow ClientHello, closed
	// for an upstream that could not be reached.
	RoutedTURN, RoutedUpstream, BadHello, Unreachable uint64
}

// Cluster is one cluster's counters: packets and bytes from (Rx) and to
// (Tx) its peers.
type Cluster struct {
	Name string
	stats.ClusterSum
}

// Offload is the kernel fast path's state and counts
// (dataplane/offload/mirror's Status and Fold).
type Offload struct {
	// Requested and Attached are the engine asked for and the hook in use
	// (None, Auto, XDP, TC; empty is None).
	Requested, Attached string
	// Paths is the number of channel paths installed in the kernel.
	Paths int
	// PutErrors counts the paths the kernel could not take.
	PutErrors uint64
	// Relayed is what the kernel relayed: PeerTx datagrams to peers,
	// PeerRx from them.
	Relayed stats.Sum
	// Kernel counts the packets the programs passed on or dropped, by
	// reason.
	Kernel offload.Stats
	// Interfaces is how the programs run on each attached interface.
	Interfaces map[string]offload.InterfaceMode
	// Reason is why the programs run or not (offloadmode.Reason*; empty
	// is NotRequested).
	Reason string
}

// Write writes s in the Prometheus text format (version 0.0.4), each
// family with its HELP and TYPE lines, under the names STUNner's
// dashboards and adopters query (docs/metrics.md). It writes to w once.
func Write(w io.Writer, s *Snapshot) {
	p := &writer{w: w}
	p.family("stunner_allocations_active", gauge, "Number of active allocations.")
	p.sample("stunner_allocations_active", "", uint64(s.Engine.Allocations()))

	p.family("stunner_listener_packets_total", counter, "Number of datagrams (stream listeners: TURN messages) received from (rx) and sent to (tx) clients at a listener.")
	for _, l := range s.Listeners {
		p.sample("stunner_listener_packets_total", nameDir(l.Name, "rx"), l.Sum.Rx)
		p.sample("stunner_listener_packets_total", nameDir(l.Name, "tx"), l.Sum.Tx)
	}
	p.family("stunner_listener_bytes_total", counter, "Number of bytes received from (rx) and sent to (tx) clients at a listener.")
	for _, l := range s.Listeners {
		p.sample("stunner_listener_bytes_total", nameDir(l.Name, "rx"), l.Sum.RxBytes)
		p.sample("stunner_listener_bytes_total", nameDir(l.Name, "tx"), l.Sum.TxBytes)
	}
	p.family("stunner_listener_connections", gauge, "Number of open client connections at a listener (TURN-UDP: its sockets, as stunnerd counts them).")
	for _, l := range s.Listeners {
		p.sample("stunner_listener_connections", label("name", l.Name), uint64(l.Conns.Active))
	}
	p.family("stunner_listener_connections_total", counter, "Number of client connections accepted at a listener (TURN-UDP: sockets opened).")
	for _, l := range s.Listeners {
		p.sample("stunner_listener_connections_total", label("name", l.Name), l.Conns.Accepted)
	}

	p.family("stunner_cluster_packets_total", counter, "Number of datagrams received from (rx) and sent to (tx) the peers of a cluster.")
	for _, c := range s.Clusters {
		p.sample("stunner_cluster_packets_total", nameDir(c.Name, "rx"), c.Rx)
		p.sample("stunner_cluster_packets_total", nameDir(c.Name, "tx"), c.Tx)
	}
	p.family("stunner_cluster_bytes_total", counter, "Number of bytes received from (rx) and sent to (tx) the peers of a cluster.")
	for _, c := range s.Clusters {
		p.sample("stunner_cluster_bytes_total", nameDir(c.Name, "rx"), c.RxBytes)
		p.sample("stunner_cluster_bytes_total", nameDir(c.Name, "tx"), c.TxBytes)
	}

	p.family("stunner_bytes_received_total", counter, "Bytes received from clients on every listener and from peers on relay sockets.")
	p.sample("stunner_bytes_received_total", "", s.All.RxBytes+s.All.PeerRxBytes)
	p.family("stunner_bytes_sent_total", counter, "Bytes sent to clients on every listener and to peers from relay sockets.")
	p.sample("stunner_bytes_sent_total", "", s.All.TxBytes+s.All.PeerTxBytes)
	p.family("stunner_connections_total", counter, "Client connections accepted on every listener (TURN-UDP: sockets opened), the sum of stunner_listener_connections_total.")
	p.sample("stunner_connections_total", "", s.Accepted)

	p.family("tern_peer_packets_total", counter, "Datagrams received from (rx) and sent to (tx) peers on relay sockets.")
	p.sample("tern_peer_packets_total", label("direction", "rx"), s.All.PeerRx)
	p.sample("tern_peer_packets_total", label("direction", "tx"), s.All.PeerTx)
	p.family("tern_peer_bytes_total", counter, "Bytes received from (rx) and sent to (tx) peers on relay sockets.")
	p.sample("tern_peer_bytes_total", label("direction", "rx"), s.All.PeerRxBytes)
	p.sample("tern_peer_bytes_total", label("direction", "tx"), s.All.PeerTxBytes)

	p.family("tern_listener_connections", gauge, "Open connections (DTLS: associations) of a TURN-TCP, TURN-TLS or TURN-DTLS listener.")
	for _, l := range s.Listeners {
		if l.Connections {
			p.sample("tern_listener_connections", label("name", l.Name), uint64(l.Conns.Active))
		}
	}
	p.family("tern_listener_connections_refused_total", counter, "Connections closed as soon as they were accepted: over limits.connectionsPerIP (per_ip) or at limits.maxConnections with none to shed (total).")
	for _, l := range s.Listeners {
		if l.Connections {
			p.sample("tern_listener_connections_refused_total", label("name", l.Name)+`,reason="per_ip"`, l.Conns.RefusedPerIP)
			p.sample("tern_listener_connections_refused_total", label("name", l.Name)+`,reason="total"`, l.Conns.RefusedTotal)
		}
	}
	p.family("tern_listener_connections_closed_total", counter, "Connections closed by ternd for a limit: to make room at limits.maxConnections (shed), silent past the idle limit (idle), a TURN-TCP/TLS frame not completed within limits.partialFrameTimeout or over the frame-buffer budget (frame), or a TURN-DTLS association whose client did not return the cookie in time or before newer ones filled the cap of unverified associations (unverified).")
	for _, l := range s.Listeners {
		if l.Connections {
			p.sample("tern_listener_connections_closed_total", label("name", l.Name)+`,reason="shed"`, l.Conns.Shed)
			p.sample("tern_listener_connections_closed_total", label("name", l.Name)+`,reason="idle"`, l.Conns.Idle)
			p.sample("tern_listener_connections_closed_total", label("name", l.Name)+`,reason="frame"`, l.Conns.Frame)
			p.sample("tern_listener_connections_closed_total", label("name", l.Name)+`,reason="unverified"`, l.Conns.Unverified)
		}
	}

	p.family("tern_listener_tls_routed_total", counter, "Connections of a TURN-TLS listener with an upstream by where their ClientHello sent them: served as TURN-TLS (turn), spliced to the upstream (upstream), closed for a ClientHello not whole within clientHelloTimeout, over 16 KiB, malformed or cut short (bad_hello), or closed for an upstream that could not be reached (upstream_unreachable).")
	for _, l := range s.Listeners {
		if l.Upstream {
			n := label("name", l.Name)
			p.sample("tern_listener_tls_routed_total", n+`,route="turn"`, l.Conns.RoutedTURN)
			p.sample("tern_listener_tls_routed_total", n+`,route="upstream"`, l.Conns.RoutedUpstream)
			p.sample("tern_listener_tls_routed_total", n+`,route="bad_hello"`, l.Conns.BadHello)
			p.sample("tern_listener_tls_routed_total", n+`,route="upstream_unreachable"`, l.Conns.Unreachable)
		}
	}

	p.family("tern_dropped_packets_total", counter, "Packets dropped, by reason.")
	for i := 1; i < turn.NumDropReasons; i++ {
		p.sample("tern_dropped_packets_total", label("reason", turn.DropReason(i).String()), s.All.Drops[i])
	}
	p.family("tern_refused_requests_total", counter, "Requests refused or dropped for policy, by reason.")
	for i := range turn.NumRefusals {
		r := turn.Refusal(i)
		p.sample("tern_refused_requests_total", label("reason", r.String()), s.Engine.Refused(r))
	}
	p.family("tern_auth_failures_total", counter, "Requests with MESSAGE-INTEGRITY that failed authentication (answered 401 or 438).")
	p.sample("tern_auth_failures_total", "", s.Engine.Refused(turn.RefusedAuth))
	p.family("tern_quota_refusals_total", counter, "Allocate requests refused over a quota: limits.allocationsPerUser (user, 486), limits.allocationsPerIP (ip, 486), limits.maxAllocations (total, 508).")
	p.sample("tern_quota_refusals_total", label("quota", "user"), s.Engine.Refused(turn.RefusedQuotaUser))
	p.sample("tern_quota_refusals_total", label("quota", "ip"), s.Engine.Refused(turn.RefusedQuotaIP))
	p.sample("tern_quota_refusals_total", label("quota", "total"), s.Engine.Refused(turn.RefusedQuotaTotal))
	p.family("tern_state_bytes", gauge, "Bytes of allocations, permissions and channel bindings charged against the state budget, at the costs docs/security.md lists.")
	p.sample("tern_state_bytes", "", uint64(max(s.Engine.StateBytes(), 0)))
	p.family("tern_state_budget_bytes", gauge, "The state budget in force (limits.stateBudgetMiB, or half the container's memory limit), bytes; 0 when off. Past it Allocate, CreatePermission and ChannelBind get 508 (tern_refused_requests_total, reason state_budget_*).")
	p.sample("tern_state_budget_bytes", "", uint64(max(s.Engine.StateBudget(), 0)))
	p.family("tern_allocation_errors_total", counter, "Allocate requests answered with an error, by code (other: a code not listed); the 401 that starts every allocation is not counted.")
	for _, code := range turn.AllocationErrorCodes {
		p.sample("tern_allocation_errors_total", label("code", strconv.Itoa(code)), s.Engine.AllocationErrors(code))
	}
	p.sample("tern_allocation_errors_total", label("code", "other"), s.Engine.AllocationErrors(0))
	p.family("tern_redirects_total", counter, "Allocate requests redirected to an alternate server with 300 Try Alternate (RFC 8489 §10), by reason: draining (SIGTERM), capacity (limits.maxAllocations, the state budget or no free relay port) or imbalance (more than limits.allocationImbalancePercent above the mean of this server and its alternates).")
	for r, name := range turn.RedirectReasons {
		p.sample("tern_redirects_total", label("reason", name), s.Engine.Redirects(turn.RedirectReason(r)))
	}
	p.family("tern_configs_rejected_total", counter, "Configs from a config discovery service that ternd refused (did not load, or the reconfiguration failed), keeping the running config.")
	p.sample("tern_configs_rejected_total", "", s.ConfigsRejected)
	writeOffload(p, &s.Offload)
	p.flush()
}

// writeOffload reports the offload engine asked for and the one attached
// (None after an Auto fallback, docs/offload-control.md), what the kernel
// relayed, the paths it relays and the Puts that failed.
func writeOffload(p *writer, st *Offload) {
	p.family("tern_offload_active", gauge, "1 for each interface the eBPF ChannelData fast path is attached to (attached: XDP or TC; reason Attached); one sample with interface=\"\" and 0 when every packet goes through sockets, with the reason: NotRequested (engine None), MissingCapability, AttachRefused, NoInterface, Unsupported or Failed.")
	reason := st.Reason
	if reason == "" {
		reason = "NotRequested"
	}
	base := label("requested", orNone(st.Requested)) + "," + label("attached", orNone(st.Attached)) + ","
	if st.Attached != "None" && st.Attached != "" && len(st.Interfaces) > 0 {
		for _, name := range slices.Sorted(maps.Keys(st.Interfaces)) {
			p.sample("tern_offload_active", base+label("interface", name)+","+label("reason", reason), 1)
		}
	} else {
		p.sample("tern_offload_active", base+label("interface", "")+","+label("reason", reason), 0)
	}
	p.family("tern_offload_interface", gauge, "1 for each interface the eBPF fast path is attached to: hook (XDP or TC), attach (tcx, clsact, xdp, xdp_generic), egress (fib: bpf_fib_lookup finds the way out and needs forwarding; same_interface: back out the arrival interface, no forwarding needed) and why (forwarding_on, loopback, single_interface, forwarding_partial, forwarding_off, xdp).")
	for _, name := range slices.Sorted(maps.Keys(st.Interfaces)) {
		im := st.Interfaces[name]
		p.sample("tern_offload_interface", label("interface", name)+","+label("hook", string(im.Hook))+","+label("attach", im.Attach)+","+
			label("egress", string(im.Egress))+","+label("why", im.Why), 1)
	}
	p.family("tern_offload_packets_total", counter, "Datagrams the kernel relayed without a socket, to peers (client_to_peer) and to clients (peer_to_client); they are counted in the listener, cluster and peer series too.")
	p.sample("tern_offload_packets_total", label("direction", "client_to_peer"), st.Relayed.PeerTx)
	p.sample("tern_offload_packets_total", label("direction", "peer_to_client"), st.Relayed.PeerRx)
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

// orNone is v, or None for an empty engine name.
func orNone(v string) string {
	if v == "" {
		return "None"
	}
	return v
}
