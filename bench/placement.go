package bench

import (
	"net/netip"

	"github.com/tern-gw/tern/bench/netns"
)

// Placement says where the flows generator opens its sockets: the
// clients' in ClientNS from ClientIP, the peer's in PeerNS on PeerIP (""
// and the zero address: this process's namespace, 127.0.97.x and
// 127.0.0.1). A socket stays in the namespace it was made in, so one
// process drives clients and peer in different namespaces (issue 15's
// veth topology: client — server — peer).
type Placement struct {
	// Topology names the setup in results ("loopback", "veth"; "" none).
	Topology string
	// ServerCPUs is the CPU list the servers are pinned to ("" none).
	ServerCPUs       string
	ClientNS, PeerNS string
	ClientIP, PeerIP netip.Addr
	// MoreClientIPs are further client addresses: flow i takes the
	// (i mod n)-th of ClientIP and these, so that K allocations stay
	// under a server's per-IP quota (ternbench -client-ip a,b,...).
	MoreClientIPs []netip.Addr
}

// Net is the placement every flows and webrtc measurement uses; set it
// before measuring, never during.
var Net Placement

// KernelCounters reads, by target name, how many datagrams that target's
// kernel fast path has relayed so far (ternd-offload's
// tern_offload_packets_total, both directions); measurements record the
// difference over their window. Set before measuring, never during.
var KernelCounters = map[string]func() (uint64, error){}

// flowClientAddr is flow i's local address under Net.
func flowClientAddr(i int) netip.AddrPort {
	if Net.ClientIP.IsValid() {
		if j := i % (1 + len(Net.MoreClientIPs)); j > 0 {
			return netip.AddrPortFrom(Net.MoreClientIPs[j-1], 0)
		}
		return netip.AddrPortFrom(Net.ClientIP, 0)
	}
	return clientAddr(i)
}

// peerListenAddr is the flows peer's address under Net.
func peerListenAddr() netip.AddrPort {
	if Net.PeerIP.IsValid() {
		return netip.AddrPortFrom(Net.PeerIP, 0)
	}
	return netip.MustParseAddrPort("127.0.0.1:0")
}

// inClientNS and inPeerNS run fn where Net puts the clients' and the
// peer's sockets.
func inClientNS(fn func() error) error { return netns.Do(Net.ClientNS, fn) }
func inPeerNS(fn func() error) error   { return netns.Do(Net.PeerNS, fn) }

// ListenerCounters read, by target name, how many datagrams the target's
// listeners have received from clients so far (ternd's
// stunner_listener_packets_total, direction rx, summed over listeners;
// the kernel fast path's packets included); measurements record the
// difference over their window, which shows whether the server took the
// clients' datagrams one by one (a UDP GSO packet passed on whole would
// count once). Set before measuring, never during.
var ListenerCounters = map[string]func() (uint64, error){}
