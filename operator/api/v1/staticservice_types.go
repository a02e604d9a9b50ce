package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StaticService is a set of IP prefixes outside the cluster that a UDPRoute
// may name as a backend, for peers that no Kubernetes Service describes.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=stunner
// +kubebuilder:printcolumn:name="Prefixes",type=string,JSONPath=`.spec.prefixes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StaticService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StaticServiceSpec `json:"spec"`
	Status ObjectStatus      `json:"status,omitempty"`
}

// StaticServiceSpec lists the prefixes of a StaticService.
type StaticServiceSpec struct {
	// Prefixes are CIDR prefixes ("192.0.2.0/24") or single IP addresses
	// whose addresses become reachable peers. 0.0.0.0/0 allows everything.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:items:MaxLength=64
	Prefixes []string `json:"prefixes"`

	// Ports is STUNner's v1alpha1 field, accepted in both versions and
	// ignored, as STUNner ignores it: every port of the prefixes is
	// reachable, and a UDPRoute backendRef's port and endPort narrow it.
	// +optional
	// +listType=map
	// +listMapKey=port
	// +listMapKey=protocol
	Ports []corev1.ServicePort `json:"ports,omitempty"`
}

// StaticServiceList is a list of StaticServices.
//
// +kubebuilder:object:root=true
type StaticServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StaticService `json:"items"`
}
