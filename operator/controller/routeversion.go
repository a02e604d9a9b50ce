package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1a2 "sigs.k8s.io/gateway-api/apis/v1alpha2"
)

// routeVersion is the version in which the operator reads and writes the Gateway API's own
// UDPRoutes. Clusters differ: Gateway API v1.5+ serves v1 (and v1alpha2 in its experimental
// channel), older installs only v1alpha2. Watching a version the cluster does not serve
// would stop the manager, so the version is discovered at start. Both versions hold the same
// objects with the same shape; render takes them as v1.
type routeVersion struct {
	version string // "v1" or "v1alpha2"
}

// discoverRouteVersion returns the UDPRoute version to use, preferring v1, or nil when the
// cluster serves no Gateway API UDPRoute (the operator then handles only stunner.l7mp.io ones).
func discoverRouteVersion(mapper meta.RESTMapper) (*routeVersion, error) {
	ms, err := mapper.RESTMappings(schema.GroupKind{Group: gwapiv1.GroupName, Kind: "UDPRoute"})
	if meta.IsNoMatchError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discover UDPRoute versions: %w", err)
	}
	served := map[string]bool{}
	for _, m := range ms {
		served[m.GroupVersionKind.Version] = true
	}
	for _, v := range []string{"v1", "v1alpha2"} {
		if served[v] {
			return &routeVersion{version: v}, nil
		}
	}
	return nil, nil
}

// object returns an empty UDPRoute of the version, to watch.
func (v *routeVersion) object() client.Object {
	if v.version == "v1" {
		return &gwapiv1.UDPRoute{}
	}
	return &gwapiv1a2.UDPRoute{}
}

// list returns all UDPRoutes as v1 objects; opts are the List options.
func (v *routeVersion) list(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]gwapiv1.UDPRoute, error) {
	if v.version == "v1" {
		var l gwapiv1.UDPRouteList
		if err := c.List(ctx, &l, opts...); err != nil {
			return nil, fmt.Errorf("list UDPRoutes.%s: %w", gwapiv1.GroupName, err)
		}
		return l.Items, nil
	}
	var l gwapiv1a2.UDPRouteList
	if err := c.List(ctx, &l, opts...); err != nil {
		return nil, fmt.Errorf("list UDPRoutes.%s: %w", gwapiv1.GroupName, err)
	}
	out := make([]gwapiv1.UDPRoute, len(l.Items))
	for i := range l.Items {
		out[i] = udpRouteV1(&l.Items[i])
	}
	return out, nil
}

// udpRouteV1 converts a v1alpha2 UDPRoute to v1: the Gateway API defines the v1alpha2 types
// in terms of the v1 ones, so this is a field-for-field copy.
func udpRouteV1(in *gwapiv1a2.UDPRoute) gwapiv1.UDPRoute {
	out := gwapiv1.UDPRoute{
		TypeMeta:   in.TypeMeta,
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Spec:       gwapiv1.UDPRouteSpec{CommonRouteSpec: *in.Spec.CommonRouteSpec.DeepCopy()},
		Status:     *(*gwapiv1.UDPRouteStatus)(in.Status.DeepCopy()),
	}
	out.SetGroupVersionKind(schema.GroupVersionKind{Group: gwapiv1.GroupName, Version: "v1", Kind: "UDPRoute"})
	for i := range in.Spec.Rules {
		out.Spec.Rules = append(out.Spec.Rules, *(*gwapiv1.UDPRouteRule)(in.Spec.Rules[i].DeepCopy()))
	}
	return out
}

// setParents writes parents into the route namespace/name's status, in the version in use.
// It returns false when the route is gone. The patch is a merge patch of status.parents only.
func (v *routeVersion) setParents(ctx context.Context, c client.Client, namespace, name string, parents []gwapiv1.RouteParentStatus) (bool, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	if v.version == "v1" {
		var rt gwapiv1.UDPRoute
		if err := c.Get(ctx, key, &rt); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		orig := rt.DeepCopy()
		rt.Status.Parents = parents
		return true, c.Status().Patch(ctx, &rt, client.MergeFrom(orig))
	}
	var rt gwapiv1a2.UDPRoute
	if err := c.Get(ctx, key, &rt); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	orig := rt.DeepCopy()
	rt.Status.Parents = parents
	return true, c.Status().Patch(ctx, &rt, client.MergeFrom(orig))
}
