package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// GatewayConfig is the STUNner-wide configuration that a GatewayClass names
// in its parametersRef: TURN authentication, realm, log level, the Dataplane
// template and annotations for the rendered LoadBalancer Services.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=stunner,shortName=gtwconf
// +kubebuilder:printcolumn:name="Realm",type=string,JSONPath=`.spec.realm`
// +kubebuilder:printcolumn:name="Dataplane",type=string,JSONPath=`.spec.dataplane`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GatewayConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GatewayConfigSpec `json:"spec,omitempty"`
	Status ObjectStatus      `json:"status,omitempty"`
}

// GatewayConfigSpec holds the fields of STUNner's GatewayConfig reference,
// plus the spellings found in adopters' manifests (userName, and password as
// a Secret key reference).
type GatewayConfigSpec struct {
	// Dataplane names the cluster-scoped Dataplane template used for the
	// dataplane pods of the Gateways under this config. Default: default.
	// +optional
	// +kubebuilder:default=default
	Dataplane *string `json:"dataplane,omitempty"`

	// StunnerConfig was the name of the ConfigMap STUNner rendered the
	// dataplane config into. Accepted for compatibility and ignored: Tern
	// names the ConfigMap after the Gateway.
	// +optional
	StunnerConfig *string `json:"stunnerConfig,omitempty"`

	// LogLevel is the dataplane log level, e.g. "all:INFO" or
	// "all:DEBUG,turn:INFO". Default: all:INFO.
	// +optional
	LogLevel *string `json:"logLevel,omitempty"`

	// Realm is the STUN/TURN authentication realm. Changing it restarts all
	// listeners. Default: stunner.l7mp.io.
	// +optional
	// +kubebuilder:validation:MaxLength=763
	Realm *string `json:"realm,omitempty"`

	// AuthRef names a Secret with keys type, username, password and secret
	// (sharedSecret is accepted too). Settings found there override the
	// inline ones.
	// +optional
	AuthRef *gwapiv1.SecretObjectReference `json:"authRef,omitempty"`

	// AuthType is static (alias plaintext) or ephemeral (aliases longterm,
	// timewindowed). Default: static. See the renderer for how longterm with
	// a password and no sharedSecret is read.
	// +optional
	AuthType *string `json:"authType,omitempty"`

	// Username is the username of static authentication.
	// +optional
	Username *string `json:"username,omitempty"`

	// UserName is an alternative spelling of Username found in adopters'
	// manifests. When both are set they must agree.
	// +optional
	UserName *string `json:"userName,omitempty"`

	// Password is the password of static authentication: either a string,
	// or a {name, namespace, key} reference to a key of a Secret. The schema
	// takes any value (the API server cannot type a field that is a string
	// or an object); the operator reports other shapes on the GatewayConfig.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Password *Password `json:"password,omitempty"`

	// SharedSecret keys ephemeral (TURN REST API) credentials.
	// +optional
	SharedSecret *string `json:"sharedSecret,omitempty"`

	// AuthLifetime is the lifetime of ephemeral credentials in seconds, used
	// by credential issuers; the dataplane does not use it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	AuthLifetime *int32 `json:"authLifetime,omitempty"`

	// LoadBalancerServiceAnnotations are copied into every rendered Service;
	// a Gateway's own annotations win on conflict.
	// +optional
	LoadBalancerServiceAnnotations map[string]string `json:"loadBalancerServiceAnnotations,omitempty"`

	// UserQuota caps the concurrent allocations of one username on each
	// dataplane pod, as in STUNner; past it an Allocate is refused with 486
	// (Allocation Quota Reached). Set, it has STUNner's meaning: N > 0 caps
	// at N, 0 (or less, which STUNner reads as 0) is no cap. Unset, Tern's
	// default applies: 100 per username with ephemeral auth, none with
	// static auth, whose one username every client shares
	// (docs/config-reference.md, limits.allocationsPerUser).
	// +optional
	UserQuota *int32 `json:"userQuota,omitempty"`

	// STUNMode makes the Gateways a STUN server only, as in STUNner: STUN
	// Binding requests are answered and every TURN request (Allocate,
	// Refresh, CreatePermission, ChannelBind) is refused with 403, so no
	// allocation is made. Credentials are then optional and, as in
	// STUNner, ignored when given (with a warning). Default false.
	// +optional
	STUNMode bool `json:"stunMode,omitempty"`

	// MetricsEndpoint is STUNner's v1alpha1 field, accepted in both
	// versions: an http://address:port/path URL turns the dataplane's
	// Prometheus endpoint on, which v1 says with the Dataplane's
	// enableMetricsEndpoint; it is served on port 8080, path /metrics
	// (a warning says so when the URL names another port). Empty: no
	// change.
	// +optional
	MetricsEndpoint *string `json:"metricsEndpoint,omitempty"`

	// HealthCheckEndpoint is STUNner's v1alpha1 field, accepted in both
	// versions: an http://address:port URL keeps health checking on (/live
	// and /ready, on port 8086, as v1 serves them; a warning says so when
	// the URL names another port), and an empty string turns it off, which
	// v1 says with the Dataplane's disableHealthCheck.
	// +optional
	HealthCheckEndpoint *string `json:"healthCheckEndpoint,omitempty"`

	// MinPort and MaxPort bound the relay port range, inclusive (STUNner's
	// v1alpha1 GatewayConfig fields, kept as a Tern extension so that the
	// range can be set, e.g. to a firewall's 30000-32767 under
	// hostNetwork). Default: 20000-29999.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	MinPort *int32 `json:"minPort,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	MaxPort *int32 `json:"maxPort,omitempty"`
}

// ObjectStatus is the status of GatewayConfig, StaticService and Dataplane:
// conditions the operator sets to report problems with the object.
type ObjectStatus struct {
	// Conditions describe the state of the object as the operator sees it.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GatewayConfigList is a list of GatewayConfigs.
//
// +kubebuilder:object:root=true
type GatewayConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GatewayConfig `json:"items"`
}
