package render

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// Input is everything Render looks at. Objects are read as the API server
// would store them, except that defaults the server would fill in may be
// missing: Render applies them itself. The order of objects does not
// matter; Render sorts what it emits.
type Input struct {
	GatewayClasses []gwapiv1.GatewayClass
	GatewayConfigs []stnrv1.GatewayConfig
	Gateways       []gwapiv1.Gateway
	// UDPRoutes are STUNner's stunner.l7mp.io/v1 routes.
	UDPRoutes []stnrv1.UDPRoute
	// GatewayUDPRoutes are the Gateway API's gateway.networking.k8s.io
	// routes, v1 or v1alpha2 (both have this shape). Their backends' ports
	// are ignored, as STUNner does: the Gateway API requires a port there.
	GatewayUDPRoutes []gwapiv1.UDPRoute
	Services         []corev1.Service
	EndpointSlices   []discoveryv1.EndpointSlice
	StaticServices   []stnrv1.StaticService
	Dataplanes       []stnrv1.Dataplane
	Secrets          []corev1.Secret
	Nodes            []corev1.Node
	Namespaces       []corev1.Namespace
}
