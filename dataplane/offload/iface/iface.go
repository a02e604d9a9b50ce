// Package iface holds what the eBPF offload (dataplane/offload) decides
// about each network interface from the kernel's view of it, without the
// loaded programs: which interfaces carry the listeners' and relay
// addresses (Carrying), how packets relayed from an interface leave it
// (EgressFor: the FIB, which needs forwarding on, or back out the same
// interface, from the forwarding sysctls and the main routing table), and
// whether Auto tries native XDP there (XDPCandidate). EgressFor and
// XDPCandidate are Linux only; each answers for the network namespace of
// the calling thread.
package iface

// Egress is how a relayed packet leaves an interface.
type Egress string

// Egress modes.
const (
	// FIB: bpf_fib_lookup finds the way out (any interface) and
	// bpf_redirect_neigh (tc) or bpf_redirect (XDP) sends it. The lookup
	// needs forwarding on the arrival interface.
	FIB Egress = "fib"
	// SameInterface: the packet goes back out the interface it
	// arrived on, the kernel's neighbour code filling in the next hop's
	// MAC (bpf_redirect_neigh without a next hop), and no FIB forwarding
	// check applies; or up this host's stack when the destination is a
	// local address. Chosen where forwarding is off and every route
	// leaves by that interface (a pod's eth0, a node's single NIC), and
	// on lo. tc only.
	SameInterface Egress = "same_interface"
)

// String returns e as the metrics and logs name it.
func (e Egress) String() string { return string(e) }
