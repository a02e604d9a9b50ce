package render

import (
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// clusterSpec is one dataplane cluster a route renders to.
type clusterSpec struct {
	name             string
	endpoints        []string
	minPort, maxPort int
}

// portRange is a backend's allowed peer ports; 0/0 is all ports.
type portRange struct{ lo, hi int }

func (p portRange) String() string {
	if p.lo == 0 && p.hi == 0 {
		return "all"
	}
	return fmt.Sprintf("%d-%d", p.lo, p.hi)
}

// backendPorts applies the reference's rule: no port means all ports, a
// port alone the single port, port and endPort the inclusive range.
func backendPorts(b *backend) portRange {
	switch {
	case b.port == 0:
		return portRange{}
	case b.endPort == 0:
		return portRange{int(b.port), int(b.port)}
	}
	return portRange{int(b.port), int(b.endPort)}
}

// resolve computes a route's clusters once: the peers of each backend
// (EndpointSlice addresses and ClusterIPs of a Service, the prefixes of a
// StaticService), one cluster per distinct port range. The cluster is named
// after the route, with ":<range>" appended when the route has several
// ranges. Backends that cannot be resolved give problems on the route and
// are left out.
func (r *renderer) resolve(rt *route) {
	if rt.resolved {
		return
	}
	rt.resolved = true
	ref := rt.ref()
	byRange := map[portRange]map[netip.Prefix]bool{}
	for i := range rt.backends {
		b := &rt.backends[i]
		pr := backendPorts(b)
		if pr.lo > pr.hi {
			rt.refProbs = append(rt.refProbs, r.problems.errorf(ref, b.field+".endPort",
				"must not be less than port (%d), got %d", pr.lo, pr.hi))
			rt.setRefReason("UnsupportedValue")
			continue
		}
		var peers []netip.Prefix
		var found bool
		switch {
		case b.group == "" && b.kind == "Service":
			peers, found = r.servicePeers(ref, b, &rt.refProbs)
		case b.group == stnrv1.GroupName && b.kind == "StaticService":
			peers, found = r.staticPeers(ref, b, &rt.refProbs)
		default:
			rt.refProbs = append(rt.refProbs, r.problems.errorf(ref, b.field,
				"unsupported backend %s.%s: want a Service (group \"\") or a StaticService (group %s)", b.kind, b.group, stnrv1.GroupName))
			rt.setRefReason(string(gwapiv1.RouteReasonInvalidKind))
			continue
		}
		if !found {
			rt.setRefReason(string(gwapiv1.RouteReasonBackendNotFound))
		}
		set := byRange[pr]
		if set == nil {
			set = map[netip.Prefix]bool{}
			byRange[pr] = set
		}
		for _, p := range peers {
			set[p] = true
		}
	}
	ranges := make([]portRange, 0, len(byRange))
	for pr := range byRange {
		ranges = append(ranges, pr)
	}
	sort.Slice(ranges, func(i, j int) bool {
		if ranges[i].lo != ranges[j].lo {
			return ranges[i].lo < ranges[j].lo
		}
		return ranges[i].hi < ranges[j].hi
	})
	for _, pr := range ranges {
		name := rt.clusterBase
		if len(ranges) > 1 {
			name += ":" + pr.String()
		}
		rt.clusters = append(rt.clusters, clusterSpec{name: name, endpoints: endpointStrings(byRange[pr]), minPort: pr.lo, maxPort: pr.hi})
	}
}

// servicePeers returns the ClusterIPs of a Service and the addresses of its
// EndpointSlices' endpoints that are serving (or, without that condition,
// ready; an endpoint with neither condition set counts). Addresses no
// Service should have (loopback, link-local, unspecified, multicast) are
// dropped with a warning: only a StaticService may open those.
func (r *renderer) servicePeers(ref ObjectRef, b *backend, ps *[]Problem) (peers []netip.Prefix, found bool) {
	key := nsName(b.namespace, b.name)
	svc := r.services[key]
	if svc == nil {
		*ps = append(*ps, r.problems.errorf(ref, b.field, "Service %s not found", key))
		return nil, false
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		*ps = append(*ps, r.problems.errorf(ref, b.field, "Service %s is of type ExternalName, which has no addresses; use a StaticService", key))
		return nil, false
	}
	var out []netip.Prefix
	add := func(s string) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		a = a.Unmap()
		if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsUnspecified() || a.IsMulticast() {
			*ps = append(*ps, r.problems.warnf(ref, b.field, "Service %s: address %s is never allowed as a peer through a Service; left out", key, a))
			return
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if ip != corev1.ClusterIPNone {
			add(ip)
		}
	}
	slices := r.slices[key]
	sort.Slice(slices, func(i, j int) bool { return slices[i].Name < slices[j].Name })
	for _, sl := range slices {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if !endpointUsable(ep.Conditions) {
				continue
			}
			for _, a := range ep.Addresses {
				add(a)
			}
		}
	}
	return out, true
}

// endpointUsable: a terminating endpoint that still serves keeps its
// sessions reachable; one explicitly neither serving nor ready does not.
func endpointUsable(c discoveryv1.EndpointConditions) bool {
	if c.Serving != nil {
		return *c.Serving
	}
	return c.Ready == nil || *c.Ready
}

// staticPeers returns a StaticService's prefixes; an invalid prefix is a
// problem on the StaticService and is left out.
func (r *renderer) staticPeers(ref ObjectRef, b *backend, ps *[]Problem) (peers []netip.Prefix, found bool) {
	key := nsName(b.namespace, b.name)
	ss := r.staticServices[key]
	if ss == nil {
		*ps = append(*ps, r.problems.errorf(ref, b.field, "StaticService %s not found", key))
		return nil, false
	}
	ssRef := ObjectRef{Group: stnrv1.GroupName, Kind: "StaticService", Namespace: ss.Namespace, Name: ss.Name}
	var out []netip.Prefix
	for i, s := range ss.Spec.Prefixes {
		p, err := parsePrefix(s)
		if err != nil {
			r.problems.errorf(ssRef, fmt.Sprintf("spec.prefixes[%d]", i), "must be an IP prefix such as 192.0.2.0/24, got %q", s)
			continue
		}
		out = append(out, p)
	}
	return out, true
}

// parsePrefix parses "a.b.c.d/n" or a bare address (a /32 or /128), masked.
func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("invalid prefix %q", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// endpointStrings returns the prefixes sorted, bare addresses for host
// prefixes, as the config's endpoints. Never nil, so a cluster without
// peers still shows endpoints: [].
func endpointStrings(set map[netip.Prefix]bool) []string {
	ps := make([]netip.Prefix, 0, len(set))
	for p := range set {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		if c := ps[i].Addr().Compare(ps[j].Addr()); c != 0 {
			return c < 0
		}
		return ps[i].Bits() < ps[j].Bits()
	})
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if p.IsSingleIP() {
			out = append(out, p.Addr().String())
		} else {
			out = append(out, p.String())
		}
	}
	return out
}
