package render

import (
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// GatewayName is a Gateway's namespace and name.
type GatewayName struct{ Namespace, Name string }

// SliceGateways returns the Gateways of in whose rendering can read the EndpointSlices of the
// Service namespace/service (the slices labelled kubernetes.io/service-name=service): the
// Gateways named by a parentRef of a route, of either group, with a backendRef of that
// name in that namespace (of any kind, so that nothing is missed), and the Gateway of that
// name, whose own Service's slices give its replica alternates. A change to those slices
// changes no other Gateway's GatewayResult, so a controller may render only these (with
// an Input holding every object but only these Gateways: a Gateway's result does not depend
// on which other Gateways are rendered with it) and leave the rest as they are. Route
// statuses and problems may change too; they are for a full Render. The result is in no
// particular order.
func SliceGateways(in *Input, namespace, service string) []GatewayName {
	set := map[GatewayName]bool{{Namespace: namespace, Name: service}: true}
	add := func(routeNS string, parents []gwapiv1.ParentReference) {
		for _, p := range parents {
			ns := routeNS
			if p.Namespace != nil && *p.Namespace != "" {
				ns = string(*p.Namespace)
			}
			set[GatewayName{Namespace: ns, Name: string(p.Name)}] = true
		}
	}
	names := func(routeNS string, ns *gwapiv1.Namespace, name gwapiv1.ObjectName) bool {
		bns := routeNS
		if ns != nil && *ns != "" {
			bns = string(*ns)
		}
		return bns == namespace && string(name) == service
	}
	for i := range in.UDPRoutes {
		rt := &in.UDPRoutes[i]
	stnr:
		for _, rule := range rt.Spec.Rules {
			for _, b := range rule.BackendRefs {
				if names(rt.Namespace, b.Namespace, b.Name) {
					add(rt.Namespace, rt.Spec.ParentRefs)
					break stnr
				}
			}
		}
	}
	for i := range in.GatewayUDPRoutes {
		rt := &in.GatewayUDPRoutes[i]
	gwapi:
		for _, rule := range rt.Spec.Rules {
			for _, b := range rule.BackendRefs {
				if names(rt.Namespace, b.Namespace, b.Name) {
					add(rt.Namespace, rt.Spec.ParentRefs)
					break gwapi
				}
			}
		}
	}
	out := make([]GatewayName, 0, len(set))
	for g := range set {
		out = append(out, g)
	}
	return out
}
