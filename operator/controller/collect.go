package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
	"github.com/tern-gw/tern/operator/render"
)

// collect lists, from the manager's caches, every object render.Input holds. Lists from a
// cache cost no API call.
// opts are the List options: client.UnsafeDisableDeepCopy for an Input only render reads
// (render neither modifies its Input nor keeps references into it).
func (r *Reconciler) collect(ctx context.Context, opts ...client.ListOption) (*render.Input, error) {
	var (
		classes    gwapiv1.GatewayClassList
		configs    stnrv1.GatewayConfigList
		gateways   gwapiv1.GatewayList
		routes     stnrv1.UDPRouteList
		services   corev1.ServiceList
		slices     discoveryv1.EndpointSliceList
		statics    stnrv1.StaticServiceList
		dataplanes stnrv1.DataplaneList
		secrets    corev1.SecretList
		nodes      corev1.NodeList
		namespaces corev1.NamespaceList
	)
	for _, l := range []client.ObjectList{&classes, &configs, &gateways, &routes, &services,
		&slices, &statics, &dataplanes, &secrets, &nodes, &namespaces} {
		if err := r.client.List(ctx, l, opts...); err != nil {
			return nil, fmt.Errorf("list %T: %w", l, err)
		}
	}
	in := &render.Input{
		GatewayClasses: classes.Items,
		GatewayConfigs: configs.Items,
		Gateways:       gateways.Items,
		UDPRoutes:      routes.Items,
		Services:       services.Items,
		EndpointSlices: slices.Items,
		StaticServices: statics.Items,
		Dataplanes:     dataplanes.Items,
		Secrets:        secrets.Items,
		Nodes:          nodes.Items,
		Namespaces:     namespaces.Items,
	}
	if r.gatewayRoutes != nil {
		var err error
		if in.GatewayUDPRoutes, err = r.gatewayRoutes.list(ctx, r.client, opts...); err != nil {
			return nil, err
		}
	}
	return in, nil
}
