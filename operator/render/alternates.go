package render

import (
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// replicaAlternates returns the dataplane config's alternates for a
// Gateway whose dataplane pods run on hostNetwork (Deployment or
// DaemonSet): the client-facing address of every ready replica, from the
// EndpointSlices of the Gateway's own Service, each with port 0 ("the port
// of the listener the Allocate arrived on", config.Config.Alternates),
// since every replica listens on the listener's port of its node. A
// replica's client-facing address is the one it advertises as its relay
// address: its node's ExternalIP (relay.nodePublicAddresses) where the
// node has one, else the endpoint's address, which for a hostNetwork pod
// is the node's address, $(NODE_IP).
//
// Ready is the endpoint's ready condition (unset counts as ready, as the
// EndpointSlice API says) and not terminating: a draining ternd answers
// 503 on /ready, so its endpoint leaves the list, and a deleted pod's
// terminating endpoint is out at once. Every ready replica is listed, the
// pod that reads the config too: ternd drops the entries that are itself
// (dataplane/alternates), so one list serves every replica and a change
// of the ready set changes only this Gateway's ConfigMap.
//
// An endpoint address of the other family than its node's first
// InternalIP (a dual-stack node) is left out: the relay of a hostNetwork
// ternd is on $(NODE_IP), one family, so a replica could not tell that
// address as its own. Addresses that cannot be an alternate (unspecified,
// multicast, link-local, loopback) are left out too. The result is sorted
// (by address text) and nil when there are none.
func (r *renderer) replicaAlternates(gw *gwapiv1.Gateway) []string {
	slices := r.slices[nsName(gw.Namespace, gw.Name)]
	if len(slices) == 0 {
		return nil
	}
	public := r.nodePublicAddresses()
	nodes := map[string]*corev1.Node{}
	for i := range r.in.Nodes {
		nodes[r.in.Nodes[i].Name] = &r.in.Nodes[i]
	}
	set := map[string]bool{}
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		for i := range s.Endpoints {
			ep := &s.Endpoints[i]
			if !endpointReady(ep) {
				continue
			}
			for _, a := range ep.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				ip = ip.Unmap()
				if ep.NodeName != nil {
					if n := nodes[*ep.NodeName]; n != nil {
						if internal, ok := firstInternalIP(n); ok && internal != ip {
							continue
						}
						if p, ok := public[n.Name]; ok {
							ip = netip.MustParseAddr(p) // nodePublicAddresses holds parsed addresses
						}
					}
				}
				if ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalUnicast() || ip.IsLoopback() {
					continue
				}
				set[netip.AddrPortFrom(ip, 0).String()] = true
			}
		}
	}
	return sortedKeys(set)
}

// endpointReady reports whether an EndpointSlice endpoint is a replica
// that takes new allocations: ready (unset means ready) and not
// terminating.
func endpointReady(ep *discoveryv1.Endpoint) bool {
	c := ep.Conditions
	return (c.Ready == nil || *c.Ready) && (c.Terminating == nil || !*c.Terminating)
}

// firstInternalIP returns a node's first InternalIP, the address the
// kubelet reports as its pods' status.hostIP ($(NODE_IP)).
func firstInternalIP(n *corev1.Node) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// AnnotationAllocationImbalance turns on the balancing of a Gateway's
// replicas (the dataplane config's limits.allocationImbalancePercent): a
// Gateway annotation whose value is a percentage, 1 to 1000. Tern's own
// key; it takes effect with the alternates, so on hostNetwork only.
const AnnotationAllocationImbalance = "tern-gw.io/allocation-imbalance-percent"

// allocationImbalance returns the percentage gw's annotation asks for, 0
// without one; a value that is not a whole number from 1 to 1000 is a
// warning on the Gateway naming the annotation, and ignored.
func (r *renderer) allocationImbalance(gw *gwapiv1.Gateway) int {
	v, ok := gw.Annotations[AnnotationAllocationImbalance]
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > 1000 {
		r.problems.warnf(gatewayRef(gw), annotationField(AnnotationAllocationImbalance),
			"want a whole percentage from 1 to 1000, got %q; ignored", v)
		return 0
	}
	return n
}
