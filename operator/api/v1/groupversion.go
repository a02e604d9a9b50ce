package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of STUNner's own resources.
const GroupName = "stunner.l7mp.io"

// GroupVersion is stunner.l7mp.io/v1.
var GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

var (
	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds GatewayConfig, UDPRoute, StaticService, Dataplane and
	// their lists to a scheme; it returns the first registration error.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&GatewayConfig{}, &GatewayConfigList{},
		&UDPRoute{}, &UDPRouteList{},
		&StaticService{}, &StaticServiceList{},
		&Dataplane{}, &DataplaneList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
