package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// UDPRoute is STUNner's own UDPRoute: it attaches to Gateways and names the
// backends (Services or StaticServices) that clients of those Gateways may
// reach. Unlike the Gateway API's UDPRoute, a backend's port is optional and
// an endPort gives a port range.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=stunner
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type UDPRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   UDPRouteSpec        `json:"spec"`
	Status gwapiv1.RouteStatus `json:"status,omitempty"`
}

// UDPRouteSpec lists the Gateways a route attaches to and its rules.
type UDPRouteSpec struct {
	// ParentRefs name the Gateways (and optionally their listeners) to attach
	// to. A parentRef without a namespace means the route's namespace.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	ParentRefs []gwapiv1.ParentReference `json:"parentRefs,omitempty"`

	// UseDefaultGateways is the Gateway API's default-Gateway scope (All or
	// None), which STUNner's UDPRoute takes from the Gateway API's common
	// route spec. Accepted and, as in STUNner, ignored: Tern has no default
	// Gateways, so a route attaches only to its parentRefs.
	// +optional
	// +kubebuilder:validation:Enum=All;None
	UseDefaultGateways gwapiv1.GatewayDefaultScope `json:"useDefaultGateways,omitempty"`

	// Rules hold the backends reachable through the route.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Rules []UDPRouteRule `json:"rules,omitempty"`
}

// UDPRouteRule is one rule of a UDPRoute.
type UDPRouteRule struct {
	// Name of the rule, for reference in status and policies.
	// +optional
	Name *gwapiv1.SectionName `json:"name,omitempty"`

	// BackendRefs are the Services or StaticServices clients may reach.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	BackendRefs []BackendRef `json:"backendRefs,omitempty"`
}

// BackendRef names a Service (group "", kind Service) or a StaticService
// (group stunner.l7mp.io) and optionally a port range on it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.endPort) || has(self.port)",message="endPort requires port"
// +kubebuilder:validation:XValidation:rule="!has(self.endPort) || self.endPort >= self.port",message="endPort must not be less than port"
type BackendRef struct {
	// Group of the backend: "" for a Service, stunner.l7mp.io for a StaticService.
	// +optional
	// +kubebuilder:default=""
	Group *gwapiv1.Group `json:"group,omitempty"`

	// Kind of the backend: Service or StaticService.
	// +optional
	// +kubebuilder:default=Service
	Kind *gwapiv1.Kind `json:"kind,omitempty"`

	// Name of the backend.
	Name gwapiv1.ObjectName `json:"name"`

	// Namespace of the backend. Default: the route's namespace.
	// +optional
	Namespace *gwapiv1.Namespace `json:"namespace,omitempty"`

	// Port is the first (or only) peer port clients may reach on the
	// backend. Empty means all ports.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port,omitempty"`

	// EndPort, with Port, makes the allowed range [port, endPort] inclusive.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	EndPort *int32 `json:"endPort,omitempty"`

	// Weight is accepted for compatibility with the Gateway API and ignored:
	// the dataplane does not balance, it only allows.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	Weight *int32 `json:"weight,omitempty"`
}

// UDPRouteList is a list of UDPRoutes.
//
// +kubebuilder:object:root=true
type UDPRouteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []UDPRoute `json:"items"`
}
