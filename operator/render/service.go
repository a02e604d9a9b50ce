package render

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// service renders the Service exposing gw's usable listeners. Without the
// mixed-protocol annotation only listeners on the first usable listener's
// transport (UDP for TURN-UDP and TURN-DTLS, TCP for TURN-TCP and TURN-TLS)
// get a port, as many load balancers cannot mix them.
//
// Annotations: the GatewayConfig's loadBalancerServiceAnnotations, then the
// Gateway's own, which win on conflict (kubectl's last-applied record is
// not copied). spec.addresses[0], an IP address, sets loadBalancerIP and
// externalIPs (loadBalancerIP only on a LoadBalancer Service).
func (r *renderer) service(gw *gwapiv1.Gateway, gc *stnrv1.GatewayConfig, listeners []*listenerState, typ corev1.ServiceType, mixed bool) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(gw),
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: selectorLabels(gw),
		},
	}
	ann := map[string]string{}
	maps.Copy(ann, gc.Spec.LoadBalancerServiceAnnotations)
	maps.Copy(ann, gw.Annotations)
	delete(ann, lastAppliedAnnotation)
	if len(ann) > 0 {
		svc.Annotations = ann
	}

	var first corev1.Protocol
	for i, ls := range listeners {
		if !ls.usable() {
			continue
		}
		if first == "" {
			first = ls.transport
		}
		if !mixed && ls.transport != first {
			r.problems.warnf(gatewayRef(gw), ls.field, "%s listener not exposed by the Service: it carries %s only unless annotated %s: \"true\"", ls.transport, first, AnnotationMixedProtocol)
			continue
		}
		ls.exposed = true
		name := string(ls.l.Name)
		if len(validation.IsDNS1123Label(name)) > 0 {
			name = fmt.Sprintf("listener-%d", i)
		}
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name:       name,
			Protocol:   ls.transport,
			Port:       int32(ls.l.Port),
			TargetPort: intstr.FromInt32(int32(ls.l.Port)),
		})
	}

	if len(gw.Spec.Addresses) > 0 {
		if a, ok := hintedAddress(gw); ok {
			// The API server refuses loadBalancerIP on other types.
			if typ == corev1.ServiceTypeLoadBalancer {
				svc.Spec.LoadBalancerIP = a
			}
			svc.Spec.ExternalIPs = []string{a}
		} else {
			r.problems.warnf(gatewayRef(gw), "spec.addresses[0]", "only an IPAddress is supported, got %s %q; ignored",
				deref(gw.Spec.Addresses[0].Type), gw.Spec.Addresses[0].Value)
		}
		if len(gw.Spec.Addresses) > 1 {
			r.problems.warnf(gatewayRef(gw), "spec.addresses", "only the first address is used")
		}
	}
	return svc
}
