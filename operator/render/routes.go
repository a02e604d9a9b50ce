package render

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// route is either kind of UDPRoute, flattened for rendering.
type route struct {
	group      string // stnrv1.GroupName or gwapiv1.GroupName
	namespace  string
	name       string
	generation int64
	parentRefs []gwapiv1.ParentReference
	backends   []backend
	// clusterBase names the route's clusters: "<namespace>/<name>", or with
	// the group in front for a Gateway API route whose name a STUNner route
	// already takes.
	clusterBase string

	// resolved lazily, once: the route's clusters and backend problems.
	resolved bool
	clusters []clusterSpec
	refProbs []Problem
	// refReason is the ResolvedRefs reason of the first failed backend.
	refReason string

	// parents has one status per parentRef that names a managed Gateway.
	parents map[int]*gwapiv1.RouteParentStatus
}

// backend is one backendRef with the path of its field.
type backend struct {
	field     string
	group     string
	kind      string
	namespace string
	name      string
	port      int32 // 0: all ports
	endPort   int32 // 0: same as port
}

func (rt *route) setRefReason(reason string) {
	if rt.refReason == "" {
		rt.refReason = reason
	}
}

func (rt *route) ref() ObjectRef {
	return ObjectRef{Group: rt.group, Kind: "UDPRoute", Namespace: rt.namespace, Name: rt.name}
}

// collectRoutes flattens both kinds of UDPRoute, sorted by group, namespace
// and name.
func (r *renderer) collectRoutes() []*route {
	var out []*route
	taken := map[string]bool{}
	for i := range r.in.UDPRoutes {
		u := &r.in.UDPRoutes[i]
		rt := &route{group: stnrv1.GroupName, namespace: u.Namespace, name: u.Name, generation: u.Generation,
			parentRefs: u.Spec.ParentRefs, clusterBase: nsName(u.Namespace, u.Name)}
		taken[rt.clusterBase] = true
		for j, rule := range u.Spec.Rules {
			for k, b := range rule.BackendRefs {
				be := backend{
					field: fmt.Sprintf("spec.rules[%d].backendRefs[%d]", j, k),
					group: string(deref(b.Group)), kind: string(deref(b.Kind)),
					namespace: string(deref(b.Namespace)), name: string(b.Name),
					port: deref(b.Port), endPort: deref(b.EndPort),
				}
				rt.backends = append(rt.backends, be)
			}
		}
		out = append(out, rt)
	}
	for i := range r.in.GatewayUDPRoutes {
		u := &r.in.GatewayUDPRoutes[i]
		rt := &route{group: gwapiv1.GroupName, namespace: u.Namespace, name: u.Name, generation: u.Generation,
			parentRefs: u.Spec.ParentRefs, clusterBase: nsName(u.Namespace, u.Name)}
		if taken[rt.clusterBase] {
			rt.clusterBase = gwapiv1.GroupName + "/" + rt.clusterBase
		}
		for j, rule := range u.Spec.Rules {
			for k, b := range rule.BackendRefs {
				// The Gateway API requires a port on Service backends;
				// STUNner's reference says it is ignored: all ports.
				rt.backends = append(rt.backends, backend{
					field: fmt.Sprintf("spec.rules[%d].backendRefs[%d]", j, k),
					group: string(deref(b.Group)), kind: string(deref(b.Kind)),
					namespace: string(deref(b.Namespace)), name: string(b.Name),
				})
			}
		}
		out = append(out, rt)
	}
	for _, rt := range out {
		for i := range rt.backends {
			b := &rt.backends[i]
			if b.kind == "" {
				b.kind = "Service"
			}
			if b.namespace == "" {
				b.namespace = rt.namespace
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.group != b.group {
			return a.group > b.group // stunner.l7mp.io first
		}
		return nsName(a.namespace, a.name) < nsName(b.namespace, b.name)
	})
	return out
}

// supportedKinds are the route kinds a TURN listener takes.
var supportedKinds = []gwapiv1.RouteGroupKind{
	{Group: ptr(gwapiv1.Group(stnrv1.GroupName)), Kind: "UDPRoute"},
	{Group: ptr(gwapiv1.Group(gwapiv1.GroupName)), Kind: "UDPRoute"},
}

// listenerKinds returns the route kinds a listener accepts and the kinds
// its allowedRoutes names that Tern does not support. A UDPRoute of either
// group stands for both: STUNner users write kind UDPRoute meaning STUNner's.
func listenerKinds(l *gwapiv1.Listener) (kinds []gwapiv1.RouteGroupKind, invalid []string) {
	if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
		return supportedKinds, nil
	}
	for _, k := range l.AllowedRoutes.Kinds {
		g := string(deref(k.Group))
		if k.Kind == "UDPRoute" && (g == "" || g == gwapiv1.GroupName || g == stnrv1.GroupName) {
			kinds = supportedKinds
			continue
		}
		if g == "" {
			g = gwapiv1.GroupName
		}
		invalid = append(invalid, string(k.Kind)+"."+g)
	}
	return kinds, invalid
}

// parentMatches reports whether a parentRef of rt names gw (any listener).
func parentMatches(rt *route, p *gwapiv1.ParentReference, gw *gwapiv1.Gateway) bool {
	if g := deref(p.Group); g != "" && string(g) != gwapiv1.GroupName {
		return false
	}
	if k := deref(p.Kind); k != "" && k != "Gateway" {
		return false
	}
	ns := rt.namespace
	if p.Namespace != nil && *p.Namespace != "" {
		ns = string(*p.Namespace)
	}
	return ns == gw.Namespace && string(p.Name) == gw.Name
}

// allowsNamespace reports whether a listener's allowedRoutes admits routes
// from namespace ns (default: the Gateway's own namespace only).
func (r *renderer) allowsNamespace(gw *gwapiv1.Gateway, l *gwapiv1.Listener, ns string) (bool, error) {
	from := gwapiv1.NamespacesFromSame
	var sel *metav1.LabelSelector
	if l.AllowedRoutes != nil && l.AllowedRoutes.Namespaces != nil {
		if l.AllowedRoutes.Namespaces.From != nil {
			from = *l.AllowedRoutes.Namespaces.From
		}
		sel = l.AllowedRoutes.Namespaces.Selector
	}
	switch from {
	case gwapiv1.NamespacesFromAll:
		return true, nil
	case gwapiv1.NamespacesFromSame:
		return ns == gw.Namespace, nil
	case gwapiv1.NamespacesFromSelector:
		if sel == nil {
			return false, fmt.Errorf("from Selector needs a selector")
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return false, err
		}
		// The API server labels every namespace with its name.
		lbls := labels.Set{"kubernetes.io/metadata.name": ns}
		if n := r.namespaces[ns]; n != nil {
			for k, v := range n.Labels {
				lbls[k] = v
			}
		}
		return s.Matches(lbls), nil
	}
	return false, fmt.Errorf("unknown from %q: want All, Same or Selector", from)
}

// routeResults returns the status of every route with a managed parent.
func (r *renderer) routeResults() []RouteResult {
	var out []RouteResult
	for _, rt := range r.routes {
		if len(rt.parents) == 0 {
			continue
		}
		idx := make([]int, 0, len(rt.parents))
		for i := range rt.parents {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		res := RouteResult{Group: rt.group, Namespace: rt.namespace, Name: rt.name}
		for _, i := range idx {
			res.Parents = append(res.Parents, *rt.parents[i])
		}
		out = append(out, res)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
