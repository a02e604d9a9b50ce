package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Dataplane is a cluster-scoped template for the dataplane pods the operator
// provisions per Gateway. A GatewayConfig picks one by name (default
// "default").
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=stunner
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Dataplane struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DataplaneSpec `json:"spec"`
	Status ObjectStatus  `json:"status,omitempty"`
}

// DataplaneSpec is the pod template of a dataplane Deployment.
type DataplaneSpec struct {
	// Image is the dataplane container image. Optional, as in STUNner:
	// unset, the renderer takes ternd's image at the operator's version.
	// +optional
	Image string `json:"image,omitempty"`

	// ImagePullPolicy: Always, Never or IfNotPresent. Default: Always for a
	// :latest (or untagged) image, IfNotPresent otherwise.
	// +optional
	ImagePullPolicy *corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// ImagePullSecrets are used to pull the image.
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// Command is the container entrypoint.
	// +optional
	Command []string `json:"command,omitempty"`

	// Args are the container arguments. The operator appends the config
	// file flag (-c) unless one is given.
	// +optional
	Args []string `json:"args,omitempty"`

	// EnvFrom populates the container environment from ConfigMaps or Secrets.
	// +optional
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// Env sets container environment variables.
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Replicas is the number of dataplane pods per Gateway. Default: 1. It is
	// not enforced once the Deployment's replica count is changed by hand
	// or by an autoscaler.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// HostNetwork runs the dataplane in the node's network namespace; the
	// relay address is then the node's address.
	// +optional
	HostNetwork bool `json:"hostNetwork,omitempty"`

	// Resources are the container's compute requests and limits.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Affinity constrains pod scheduling.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Tolerations of the pod.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// TopologySpreadConstraints of the pod.
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// SecurityContext of the pod.
	// +optional
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`

	// ContainerSecurityContext of the dataplane container.
	// +optional
	ContainerSecurityContext *corev1.SecurityContext `json:"containerSecurityContext,omitempty"`

	// Labels are added to the dataplane pods.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations are added to the dataplane pods.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// DisableHealthCheck turns off the HTTP health endpoint (port 8086,
	// /live and /ready) and the pod's probes on it. Default: false.
	// +optional
	DisableHealthCheck bool `json:"disableHealthCheck,omitempty"`

	// EnableMetricsEndpoint serves Prometheus metrics on port 8080 (/metrics).
	// +optional
	EnableMetricsEndpoint bool `json:"enableMetricsEndpoint,omitempty"`

	// HealthCheckPort is STUNner's v1alpha1 field, accepted in both
	// versions: the port of the health endpoint. v1 has no such port (it
	// serves health on 8086 unless disableHealthCheck), and neither does
	// Tern: the Dataplane gets a warning when this names another port.
	// +optional
	HealthCheckPort *int32 `json:"healthCheckPort,omitempty"`

	// TerminationGracePeriodSeconds is how long a dataplane pod may drain
	// before it is killed. Default: 30.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`

	// OffloadEngine selects the eBPF ChannelData fast path for TURN-UDP
	// listeners: None (the default) relays through sockets; any other
	// value (Auto, XDP, TC; TCMux is read as TC) turns it on, rendered into
	// the config as offload.engine Auto, which picks tc or XDP per
	// interface and falls back to sockets with a log line where BPF is
	// refused, so a pod that cannot attach never crash-loops. When not
	// None, the container runs as root, not privileged, with the
	// capabilities BPF needs (BPF, NET_ADMIN, PERFMON) unless
	// containerSecurityContext sets its own, and the Gateway gets the
	// condition OffloadRequested; OffloadActive says whether its ready
	// pods attached, as each reports at its health port.
	// +optional
	// +kubebuilder:validation:Enum=None;Auto;XDP;TC;TCMux
	OffloadEngine string `json:"offloadEngine,omitempty"`

	// ConfigSource is Tern's field (STUNner has none): where the dataplane
	// pods get their config. CDS (the default) watches tern-operator's
	// config discovery service, the Service stunner-config-discovery of the
	// operator's namespace by its ClusterIP (-c http://<ClusterIP>:13478;
	// by its DNS name while it has none), as STUNner's pods do: the pods
	// get no ServiceAccount token (automountServiceAccountToken: false), no
	// Role and no config volume; credentials still come from the mounted
	// Secret. ConfigMap mounts the Gateway's ConfigMap and watches it
	// through the Kubernetes API as the Gateway's ServiceAccount, with a
	// Role that lets it read that one ConfigMap. Unset means CDS, or
	// ConfigMap when the operator serves no config discovery service
	// (--config-discovery-address=0).
	// +optional
	// +kubebuilder:validation:Enum=ConfigMap;CDS
	ConfigSource string `json:"configSource,omitempty"`

	// OffloadInterfaces names the interfaces the fast path attaches to,
	// rendered into the config's offload.interfaces; empty means those that
	// carry a listener or relay address.
	// +optional
	OffloadInterfaces []string `json:"offloadInterfaces,omitempty"`

	// DataplaneResource is the kind the dataplane is deployed as, as in
	// STUNner: Deployment (the default: spec.replicas pods) or DaemonSet
	// (one pod on each node the pods may be scheduled on; spec.replicas is
	// ignored). Both run the same pods behind the same Service; switching
	// kinds replaces one by the other.
	// +optional
	// +kubebuilder:validation:Enum=Deployment;DaemonSet
	DataplaneResource *string `json:"dataplaneResource,omitempty"`
}

// DataplaneList is a list of Dataplanes.
//
// +kubebuilder:object:root=true
type DataplaneList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Dataplane `json:"items"`
}
