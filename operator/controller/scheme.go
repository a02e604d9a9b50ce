package controller

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1a2 "sigs.k8s.io/gateway-api/apis/v1alpha2"

	stunnerv1 "github.com/tern-gw/tern/operator/api/v1"
)

// NewScheme returns a scheme with every type the operator reads or writes: the core
// Kubernetes API, the Gateway API (v1, and v1alpha2 for UDPRoute) and stunner.l7mp.io/v1.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(gwapiv1.Install(s))
	utilruntime.Must(gwapiv1a2.Install(s))
	utilruntime.Must(stunnerv1.AddToScheme(s))
	return s
}
