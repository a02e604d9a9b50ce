package render

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/placeholder"
)

// AnnotationIPFamilyPolicy sets the rendered Service's ipFamilyPolicy:
// SingleStack, PreferDualStack or RequireDualStack (Kubernetes' values,
// any case). Tern's own key: STUNner renders single-stack Services only.
// Read from the Service annotations (the GatewayConfig's, then the
// Gateway's), so a GatewayConfig can make all its Gateways dual-stack.
const AnnotationIPFamilyPolicy = "tern-gw.io/ip-family-policy"

// ipFamilyPolicy returns the ipFamilyPolicy gw's Service gets, nil when
// nothing asks for one (the cluster's default, single-stack), and the
// annotation value it could not read ("" when none). The annotation wins;
// without it, an IPv6 address among spec.addresses, or a dual-stack
// cluster (dualStackCluster), asks for PreferDualStack, which a
// single-stack cluster serves with its one family.
func (r *renderer) ipFamilyPolicy(gw *gwapiv1.Gateway, ann map[string]string) (*corev1.IPFamilyPolicy, string) {
	if v, ok := ann[AnnotationIPFamilyPolicy]; ok {
		for _, p := range []corev1.IPFamilyPolicy{corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack} {
			if strings.EqualFold(strings.TrimSpace(v), string(p)) {
				return &p, ""
			}
		}
		return nil, v
	}
	dual := r.dualStackCluster()
	for _, a := range hintedAddresses(gw) {
		dual = dual || a.Is6()
	}
	if dual {
		p := corev1.IPFamilyPolicyPreferDualStack
		return &p, ""
	}
	return nil, ""
}

// dualStackCluster reports whether the input's Nodes show a dual-stack
// cluster: a Node whose spec.podCIDRs hold a prefix of each family (what
// kube-controller-manager allocates with dual-stack cluster CIDRs), so its
// pods get an IP of each.
func (r *renderer) dualStackCluster() bool {
	for i := range r.in.Nodes {
		var has4, has6 bool
		for _, c := range r.in.Nodes[i].Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				has4 = has4 || p.Addr().Is4()
				has6 = has6 || p.Addr().Is6()
			}
		}
		if has4 && has6 {
			return true
		}
	}
	return false
}

// dualStack reports whether policy asks for both families.
func dualStack(policy *corev1.IPFamilyPolicy) bool {
	return policy != nil && *policy != corev1.IPFamilyPolicySingleStack
}

// hintedAddresses returns the IP addresses of spec.addresses, in order.
func hintedAddresses(gw *gwapiv1.Gateway) []netip.Addr {
	var out []netip.Addr
	for _, a := range gw.Spec.Addresses {
		if a.Type != nil && *a.Type != gwapiv1.IPAddressType {
			continue
		}
		if ip, err := netip.ParseAddr(a.Value); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// firstOfEachFamily returns the first IPv4 and the first IPv6 address of
// addrs, in the order they come.
func firstOfEachFamily(addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	var has4, has6 bool
	for _, a := range addrs {
		switch {
		case a.Is4() && !has4:
			has4 = true
		case a.Is6() && !has6:
			has6 = true
		default:
			continue
		}
		out = append(out, a)
	}
	return out
}

// dualStackRelay sets the relay addresses of a dual-stack Gateway's
// config: in a pod, every pod IP ($(POD_IPS), from status.podIPs), unless
// the pod runs on the host network, whose relay stays on the node's IP;
// standalone (`ternd -f`, no pod), the first IPv4 and IPv6 address of
// spec.addresses, which are then the host's own.
func dualStackRelay(relay *config.Relay, gw *gwapiv1.Gateway, standalone, hostNetwork bool) {
	switch {
	case !standalone && !hostNetwork:
		relay.Address = placeholder.PodIPs
	case standalone:
		ips := firstOfEachFamily(hintedAddresses(gw))
		if len(ips) == 0 {
			return
		}
		// IPv4 first: the relay that clients naming no family get.
		if len(ips) == 2 && ips[1].Is4() {
			ips[0], ips[1] = ips[1], ips[0]
		}
		relay.Address = ips[0].String()
		for _, ip := range ips[1:] {
			relay.ExtraAddresses = append(relay.ExtraAddresses, config.RelayAddress{Address: ip.String()})
		}
	}
}

// withPodIPs gives the dataplane container of pod the environment variable
// POD_IPS: every pod IP, comma-separated (the downward API's
// status.podIPs), which $(POD_IPS) in the relay address stands for.
func withPodIPs(pod *corev1.PodSpec) {
	for i := range pod.Containers {
		c := &pod.Containers[i]
		if c.Name != ContainerName {
			continue
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: "POD_IPS",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}})
	}
}
