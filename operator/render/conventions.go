package render

// Where the rendered Deployment puts things, and what ternd reads; see the
// package documentation.
const (
	// ConfigKey is the ConfigMap key holding the dataplane config.
	ConfigKey = "tern.yaml"
	// ConfigDir is where the ConfigMap is mounted in the dataplane pod.
	ConfigDir = "/etc/tern/config"
	// ConfigPath is the config file ternd is pointed at with -c.
	ConfigPath = ConfigDir + "/" + ConfigKey
	// TLSDir holds one directory per TLS Secret, named after the Secret,
	// with files tls.crt and tls.key.
	TLSDir = "/etc/tern/tls"

	// HealthPort serves /live and /ready unless the Dataplane disables it.
	HealthPort = 8086
	// MetricsPort serves /metrics when the Dataplane enables it.
	MetricsPort = 8080
	// MetricsPortName names the container port of MetricsPort: STUNner's
	// name, which the PodMonitor of its monitoring guide selects.
	MetricsPortName = "metrics-port"

	// ContainerName is the name of the dataplane container.
	ContainerName = "ternd"
)

// Annotations read from Gateways, as in STUNner's reference.
const (
	// AnnotationServiceType sets the rendered Service's type: ClusterIP,
	// NodePort or LoadBalancer (the default).
	AnnotationServiceType = "stunner.l7mp.io/service-type"
	// AnnotationMixedProtocol "true" exposes UDP and TCP listeners in one
	// Service; otherwise only listeners of the first listener's transport.
	AnnotationMixedProtocol = "stunner.l7mp.io/enable-mixed-protocol-lb"
	// AnnotationExternalTrafficPolicy "local" sets the Service's
	// externalTrafficPolicy to Local (NodePort and LoadBalancer only), so
	// that STUN sees clients' own addresses.
	AnnotationExternalTrafficPolicy = "stunner.l7mp.io/external-traffic-policy"
	// AnnotationNodePort fixes listeners' node ports: a JSON map of
	// listener name to port, e.g. {"udp-listener": 30478}.
	AnnotationNodePort = "stunner.l7mp.io/nodeport"
	// AnnotationTargetPort maps listeners to another port in the pod, in the
	// nodeport annotation's syntax: ternd listens there and the Service
	// forwards the listener's port to it (443 outside, 44321 inside).
	AnnotationTargetPort = "stunner.l7mp.io/targetport"
	// AnnotationDisableHealthCheckExpose "true" keeps the health-check port
	// out of a LoadBalancer Service.
	AnnotationDisableHealthCheckExpose = "stunner.l7mp.io/disable-health-check-expose"
	// AnnotationDisableSessionAffinity "true" leaves the Service without
	// sessionAffinity: ClientIP, which some providers refuse on UDP.
	AnnotationDisableSessionAffinity = "stunner.l7mp.io/disable-session-affinity"
	// AnnotationDisableManagedDataplane "true" renders no Deployment for the
	// Gateway: the user runs the dataplane, reading the rendered ConfigMap.
	AnnotationDisableManagedDataplane = "stunner.l7mp.io/disable-managed-dataplane"
)

// HealthCheckPortName names the Service port that exposes the health-check
// port of a LoadBalancer Service, as STUNner names it.
const HealthCheckPortName = "gateway-health-check"

// Labels of the rendered objects. The selector labels are STUNner's, so
// NetworkPolicies, ServiceMonitors and PodMonitors written for STUNner's
// dataplane pods select Tern's too.
const (
	LabelApp              = "app"
	LabelAppValue         = "stunner"
	LabelGatewayName      = "stunner.l7mp.io/related-gateway-name"
	LabelGatewayNamespace = "stunner.l7mp.io/related-gateway-namespace"
	LabelManagedBy        = "app.kubernetes.io/managed-by"
	LabelManagedByValue   = "tern-operator"
	LabelName             = "app.kubernetes.io/name"
	LabelNameValue        = "ternd"
	LabelInstance         = "app.kubernetes.io/instance"
	// LabelOwnedBy marks every object the operator renders, as STUNner's
	// operator marks its own (tools written for STUNner select on it).
	LabelOwnedBy      = "stunner.l7mp.io/owned-by"
	LabelOwnedByValue = "stunner"
)

// AnnotationRelatedGateway names the Gateway ("namespace/name") an object
// was rendered for: on the ConfigMap, Service, dataplane workload and its
// pods, as STUNner annotates them. The key is the same as LabelGatewayName.
const AnnotationRelatedGateway = "stunner.l7mp.io/related-gateway-name"

// DefaultLabelFilter are the label keys of a Gateway that are not copied to
// its dataplane Deployment or DaemonSet (STUNner's list: the labels of
// tools that track what they applied, which must not claim the rendered
// object). Options.LabelFilter replaces it.
var DefaultLabelFilter = []string{
	"applyset.kubernetes.io/part-of",
	"applyset.k8s.io/part-of",
	"app.kubernetes.io/managed-by",
	"argocd.argoproj.io/instance",
	"kustomize.toolkit.fluxcd.io/name",
	"kustomize.toolkit.fluxcd.io/namespace",
}

// The dataplane resource kinds of the Dataplane's spec.dataplaneResource.
const (
	DataplaneResourceDeployment = "Deployment"
	DataplaneResourceDaemonSet  = "DaemonSet"
)

// The environment STUNner's operator gives stunnerd, which the rendered
// pods carry too (besides Tern's own POD_IP, NODE_IP, NODE_NAME, ...), so
// that Dataplane args, sidecars and scripts written for STUNner find it.
const (
	// EnvAddr is the pod's address (status.podIP), stunnerd's default relay
	// address ("$STUNNER_ADDR" in stunnerd configs).
	EnvAddr = "STUNNER_ADDR"
	// EnvName and EnvNamespace are the Gateway's name and namespace, from
	// which ternd and stunnerd make their id (namespace/name).
	EnvName      = "STUNNER_NAME"
	EnvNamespace = "STUNNER_NAMESPACE"
	// EnvNodeName is the node the pod runs on (spec.nodeName).
	EnvNodeName = "STUNNER_NODENAME"
	// EnvConfigOrigin is where stunnerd loads its config from. As in
	// STUNner, it is the config discovery service (configDiscoveryOrigin)
	// in CDS mode; in ConfigMap mode it is the mounted config file as a
	// file:// URI (stunnerd's form for a file), which ternd ignores when
	// -c, -f or --configmap say where the config is.
	EnvConfigOrigin = "STUNNER_CONFIG_ORIGIN"
)

// ConfigOrigin is the value of EnvConfigOrigin in ConfigMap mode:
// ConfigPath as a file:// URI.
const ConfigOrigin = "file://" + ConfigPath

// Where tern-operator's config discovery service is, as the deploy/
// manifests and the Helm chart install it: the Service
// stunner-config-discovery (STUNner's name) in tern-system, on STUNner's
// port 13478.
const (
	ConfigDiscoveryService          = "stunner-config-discovery"
	DefaultConfigDiscoveryNamespace = "tern-system"
	DefaultConfigDiscoveryPort      = 13478
)

// The values of a Dataplane's spec.configSource. CDS is the default, unless
// the operator serves no config discovery service (Options.NoConfigDiscovery).
const (
	ConfigSourceConfigMap = "ConfigMap"
	ConfigSourceCDS       = "CDS"
)

// DefaultDataplaneName is the Dataplane a GatewayConfig uses unless it
// names another.
const DefaultDataplaneName = "default"

// lastAppliedAnnotation is kubectl's record of the Gateway manifest; copied
// to the Service it would make kubectl treat the Service as its own.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
