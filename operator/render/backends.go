package render

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config/endpoint"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// clusterSpec is one dataplane cluster a route renders to.
type clusterSpec struct {
	name             string
	endpoints        []string
	minPort, maxPort int
	// strictDNS: endpoints are host names (config.ClusterStrictDNS) that
	// the dataplane resolves and re-resolves.
	strictDNS bool
}

// clusterKey groups a route's peers into clusters: one per port range and
// kind of endpoint, since a cluster is either addresses or host names.
type clusterKey struct {
	ports portRange
	dns   bool
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
// StaticService) and the host names of each (an ExternalName Service's
// externalName, the addresses of FQDN EndpointSlices), one cluster per
// distinct port range and kind. The cluster is named after the route, with
// ":<range>" appended when the route has several ranges, and ":dns" on a
// host-name cluster when the route has address clusters too. Host names
// render to STRICT_DNS clusters, which ternd resolves and re-resolves, as
// STUNner's STRICT_DNS clusters are. Backends that cannot be resolved give
// problems on the route and are left out.
func (r *renderer) resolve(rt *route) {
	if rt.resolved {
		return
	}
	rt.resolved = true
	ref := rt.ref()
	peersBy := map[clusterKey]map[netip.Prefix]bool{}
	hostsBy := map[clusterKey]map[string]bool{}
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
		var hosts []string
		var found bool
		switch {
		case b.group == "" && b.kind == "Service":
			peers, hosts, found = r.servicePeers(ref, b, &rt.refProbs)
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
		// A backend with neither addresses nor names still gets its
		// (empty) address cluster, as before host names existed.
		if len(hosts) == 0 || len(peers) > 0 {
			k := clusterKey{ports: pr}
			if peersBy[k] == nil {
				peersBy[k] = map[netip.Prefix]bool{}
			}
			for _, p := range peers {
				peersBy[k][p] = true
			}
		}
		if len(hosts) > 0 {
			k := clusterKey{ports: pr, dns: true}
			if hostsBy[k] == nil {
				hostsBy[k] = map[string]bool{}
			}
			for _, h := range hosts {
				hostsBy[k][h] = true
			}
		}
	}
	ranges := map[portRange]bool{}
	var keys []clusterKey
	for k := range peersBy {
		keys, ranges[k.ports] = append(keys, k), true
	}
	for k := range hostsBy {
		keys, ranges[k.ports] = append(keys, k), true
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.ports.lo != b.ports.lo {
			return a.ports.lo < b.ports.lo
		}
		if a.ports.hi != b.ports.hi {
			return a.ports.hi < b.ports.hi
		}
		return !a.dns && b.dns
	})
	for _, k := range keys {
		name := rt.clusterBase
		if len(ranges) > 1 {
			name += ":" + k.ports.String()
		}
		if !k.dns {
			rt.clusters = append(rt.clusters, clusterSpec{name: name, endpoints: endpointStrings(peersBy[k]), minPort: k.ports.lo, maxPort: k.ports.hi})
			continue
		}
		if len(peersBy) > 0 {
			name += ":dns"
		}
		rt.clusters = append(rt.clusters, clusterSpec{name: name, endpoints: sortedKeys(hostsBy[k]), minPort: k.ports.lo, maxPort: k.ports.hi, strictDNS: true})
	}
}

// servicePeers returns the ClusterIPs of a Service and the addresses of its
// EndpointSlices' endpoints that are serving (or, without that condition,
// ready; an endpoint with neither condition set counts), and the host names
// of an ExternalName Service (its externalName) and of FQDN EndpointSlices.
// Addresses no Service should have (loopback, link-local, unspecified,
// multicast) are dropped with a warning: only a StaticService may open
// those. A host name's answers are checked by ternd against the same
// protected ranges as every peer (docs/security.md).
func (r *renderer) servicePeers(ref ObjectRef, b *backend, ps *[]Problem) (peers []netip.Prefix, hosts []string, found bool) {
	key := nsName(b.namespace, b.name)
	svc := r.services[key]
	if svc == nil {
		*ps = append(*ps, r.problems.errorf(ref, b.field, "Service %s not found", key))
		return nil, nil, false
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
	addHost := func(h, what string) {
		if !endpoint.ValidHostname(h) {
			*ps = append(*ps, r.problems.warnf(ref, b.field, "Service %s: %s %q is not a host name; left out", key, what, h))
			return
		}
		hosts = append(hosts, strings.ToLower(strings.TrimSuffix(h, ".")))
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		// An IP written as the externalName is an address, not a name.
		if _, err := netip.ParseAddr(svc.Spec.ExternalName); err == nil {
			add(svc.Spec.ExternalName)
		} else {
			addHost(svc.Spec.ExternalName, "externalName")
		}
		return out, hosts, true
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
		var each func(string)
		switch sl.AddressType {
		case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
			each = add
		case discoveryv1.AddressTypeFQDN:
			each = func(h string) { addHost(h, "FQDN endpoint") }
		default:
			continue
		}
		for _, ep := range sl.Endpoints {
			if !endpointUsable(ep.Conditions) {
				continue
			}
			for _, a := range ep.Addresses {
				each(a)
			}
		}
	}
	return out, hosts, true
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
