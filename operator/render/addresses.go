package render

import (
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// serviceSettings reads the Service type and the mixed-protocol switch from
// ann, the Service's annotations (serviceAnnotations: the GatewayConfig's
// then the Gateway's, so a GatewayConfig can set a default type for all its
// Gateways, as in STUNner); an unknown type is a problem and falls back to
// LoadBalancer.
func (r *renderer) serviceSettings(gw *gwapiv1.Gateway, ann map[string]string) (corev1.ServiceType, bool) {
	typ := corev1.ServiceTypeLoadBalancer
	if v, ok := ann[AnnotationServiceType]; ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "clusterip":
			typ = corev1.ServiceTypeClusterIP
		case "nodeport":
			typ = corev1.ServiceTypeNodePort
		case "loadbalancer":
		default:
			r.problems.warnf(gatewayRef(gw), "metadata.annotations["+AnnotationServiceType+"]",
				"unknown Service type %q: want ClusterIP, NodePort or LoadBalancer; using LoadBalancer", v)
		}
	}
	mixed := strings.EqualFold(strings.TrimSpace(ann[AnnotationMixedProtocol]), "true")
	return typ, mixed
}

// gatewayAddresses returns the addresses clients reach gw at, as far as
// the input tells: the ingress of the Gateway's Service if it has one, the
// ExternalIP (else InternalIP) of the first node for a NodePort Service,
// the ClusterIP for a ClusterIP Service, else the address hinted in
// spec.addresses.
func (r *renderer) gatewayAddresses(gw *gwapiv1.Gateway, typ corev1.ServiceType) []gwapiv1.GatewayStatusAddress {
	var out []gwapiv1.GatewayStatusAddress
	ip := func(v string) {
		out = append(out, gwapiv1.GatewayStatusAddress{Type: ptr(gwapiv1.IPAddressType), Value: v})
	}
	svc := r.services[nsName(gw.Namespace, gw.Name)]
	switch typ {
	case corev1.ServiceTypeLoadBalancer:
		if svc != nil {
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				switch {
				case ing.IP != "":
					ip(ing.IP)
				case ing.Hostname != "":
					out = append(out, gwapiv1.GatewayStatusAddress{Type: ptr(gwapiv1.HostnameAddressType), Value: ing.Hostname})
				}
			}
		}
	case corev1.ServiceTypeNodePort:
		if a := r.nodeAddress(); a != "" {
			ip(a)
		}
	case corev1.ServiceTypeClusterIP:
		if svc != nil && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			ip(svc.Spec.ClusterIP)
		}
	}
	if len(out) == 0 {
		if a, ok := hintedAddress(gw); ok {
			ip(a)
		}
	}
	return out
}

// hintedAddress returns spec.addresses[0] when it is an IP address.
func hintedAddress(gw *gwapiv1.Gateway) (string, bool) {
	if len(gw.Spec.Addresses) == 0 {
		return "", false
	}
	a := gw.Spec.Addresses[0]
	if a.Type != nil && *a.Type != gwapiv1.IPAddressType {
		return "", false
	}
	if _, err := netip.ParseAddr(a.Value); err != nil {
		return "", false
	}
	return a.Value, true
}

// nodeAddress returns the ExternalIP of the first node (by name) that has
// one, else the first InternalIP.
func (r *renderer) nodeAddress() string {
	nodes := make([]*corev1.Node, 0, len(r.in.Nodes))
	for i := range r.in.Nodes {
		nodes = append(nodes, &r.in.Nodes[i])
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for _, typ := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
		for _, n := range nodes {
			for _, a := range n.Status.Addresses {
				if a.Type == typ && a.Address != "" {
					return a.Address
				}
			}
		}
	}
	return ""
}

// publicIP returns the first IP address among addrs, or "".
func publicIP(addrs []gwapiv1.GatewayStatusAddress) string {
	for _, a := range addrs {
		if a.Type == nil || *a.Type == gwapiv1.IPAddressType {
			return a.Value
		}
	}
	return ""
}

// publicPort is the port clients use for a listener: the node port of an
// existing NodePort Service, else, when the rendered Service (of type typ)
// is a NodePort Service with the listener's node port fixed by annotation,
// that port, else the listener's port.
func (r *renderer) publicPort(gw *gwapiv1.Gateway, ls *listenerState, typ corev1.ServiceType) int {
	if svc := r.services[nsName(gw.Namespace, gw.Name)]; svc != nil && svc.Spec.Type == corev1.ServiceTypeNodePort {
		for _, p := range svc.Spec.Ports {
			if p.Port == int32(ls.l.Port) && p.Protocol == ls.transport && p.NodePort != 0 {
				return int(p.NodePort)
			}
		}
	}
	if typ == corev1.ServiceTypeNodePort && ls.nodePort != 0 {
		return ls.nodePort
	}
	return int(ls.l.Port)
}

// nodePublicAddresses maps each node that has an ExternalIP to it, for a
// hostNetwork dataplane: its relay sockets are on the node's address
// ($(NODE_IP), the downward API's status.hostIP, which is the node's first
// InternalIP), and clients must be given the address the node is reached
// at from outside, as STUNner does under hostNetwork. ternd picks its own
// node's entry by NODE_NAME (config.Relay.NodePublicAddresses). The
// ExternalIP taken is the first of the InternalIP's family, since the
// relay socket can advertise no other; a node with no InternalIP (hostIP
// is then its ExternalIP already), with no ExternalIP of that family, or
// whose ExternalIP is its InternalIP, has no entry and advertises
// $(NODE_IP). Nil when no node has one.
func (r *renderer) nodePublicAddresses() map[string]string {
	var out map[string]string
	for i := range r.in.Nodes {
		n := &r.in.Nodes[i]
		var internal netip.Addr
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				internal = ip.Unmap()
				break
			}
		}
		if !internal.IsValid() {
			continue
		}
		for _, a := range n.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || a.Type != corev1.NodeExternalIP || ip.Unmap().Is4() != internal.Is4() {
				continue
			}
			if ip.Unmap() != internal {
				if out == nil {
					out = map[string]string{}
				}
				out[n.Name] = ip.Unmap().String()
			}
			break
		}
	}
	return out
}
