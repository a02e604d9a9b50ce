package render

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// serviceAnnotations returns the annotations of gw's Service: the
// GatewayConfig's loadBalancerServiceAnnotations (gc may be nil), then the
// Gateway's own, which win on conflict (kubectl's last-applied record is
// not copied). STUNner's annotations are read from this merged set, so a
// GatewayConfig can set them for all its Gateways.
func serviceAnnotations(gw *gwapiv1.Gateway, gc *stnrv1.GatewayConfig) map[string]string {
	ann := map[string]string{}
	if gc != nil {
		maps.Copy(ann, gc.Spec.LoadBalancerServiceAnnotations)
	}
	maps.Copy(ann, gw.Annotations)
	delete(ann, lastAppliedAnnotation)
	return ann
}

func annotationField(key string) string { return "metadata.annotations[" + key + "]" }

func annotationTrue(ann map[string]string, key string) bool {
	return strings.EqualFold(strings.TrimSpace(ann[key]), "true")
}

// service renders the Service exposing gw's usable listeners. Without the
// mixed-protocol annotation only listeners on the first usable listener's
// transport (UDP for TURN-UDP and TURN-DTLS, TCP for TURN-TCP and TURN-TLS)
// get a port, as many load balancers cannot mix them.
//
// ann are serviceAnnotations. spec.addresses[0], an IP address, sets
// loadBalancerIP and externalIPs (loadBalancerIP only on a LoadBalancer
// Service). STUNner's Service annotations are honoured as its operator
// does: session affinity, external traffic policy, node and target ports,
// and the health-check port on LoadBalancer Services.
func (r *renderer) service(gw *gwapiv1.Gateway, ann map[string]string, listeners []*listenerState, typ corev1.ServiceType, mixed bool) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(gw),
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: selectorLabels(gw),
		},
	}
	// The Gateway's annotations, and the related-gateway one, which is ours.
	maps.Copy(svc.Annotations, ann)
	maps.Copy(svc.Annotations, objectAnnotations(gw))
	// A TURN allocation lives in one pod: a client whose packets a load
	// balancer spreads over pods loses it. ClientIP keeps each client on
	// one pod, as STUNner does unless told otherwise.
	if !annotationTrue(ann, AnnotationDisableSessionAffinity) {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	}
	if v, ok := ann[AnnotationExternalTrafficPolicy]; ok {
		switch {
		case strings.EqualFold(strings.TrimSpace(v), "local") && typ != corev1.ServiceTypeClusterIP:
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		case strings.EqualFold(strings.TrimSpace(v), "local"):
			// The API server refuses the field on a ClusterIP Service.
			r.problems.warnf(gatewayRef(gw), annotationField(AnnotationExternalTrafficPolicy), "ignored on a ClusterIP Service")
		case !strings.EqualFold(strings.TrimSpace(v), "cluster"):
			r.problems.warnf(gatewayRef(gw), annotationField(AnnotationExternalTrafficPolicy), "want Local or Cluster, got %q; ignored", v)
		}
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
			TargetPort: intstr.FromInt32(int32(ls.port())),
			NodePort:   int32(ls.nodePort),
		})
	}
	if typ == corev1.ServiceTypeLoadBalancer && !annotationTrue(ann, AnnotationDisableHealthCheckExpose) {
		r.healthCheckPort(gw, svc, ann)
	}

	policy, bad := r.ipFamilyPolicy(gw, ann)
	if bad != "" {
		r.problems.warnf(gatewayRef(gw), annotationField(AnnotationIPFamilyPolicy),
			"want SingleStack, PreferDualStack or RequireDualStack, got %q; ignored", bad)
	}
	svc.Spec.IPFamilyPolicy = policy
	if len(gw.Spec.Addresses) > 0 {
		used := 1
		if a, ok := hintedAddress(gw); ok {
			// The API server refuses loadBalancerIP on other types.
			if typ == corev1.ServiceTypeLoadBalancer {
				svc.Spec.LoadBalancerIP = a
			}
			svc.Spec.ExternalIPs = []string{a}
			if dualStack(policy) {
				// One address of each family: clients of both reach it.
				ips := firstOfEachFamily(hintedAddresses(gw))
				svc.Spec.ExternalIPs = svc.Spec.ExternalIPs[:0]
				for _, ip := range ips {
					svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, ip.String())
				}
				used = len(ips)
			}
		} else {
			r.problems.warnf(gatewayRef(gw), "spec.addresses[0]", "only an IPAddress is supported, got %s %q; ignored",
				deref(gw.Spec.Addresses[0].Type), gw.Spec.Addresses[0].Value)
		}
		if len(gw.Spec.Addresses) > used {
			if used == 1 {
				r.problems.warnf(gatewayRef(gw), "spec.addresses", "only the first address is used")
			} else {
				r.problems.warnf(gatewayRef(gw), "spec.addresses", "only the first address of each family is used")
			}
		}
	}
	return svc
}

// Cloud providers' load-balancer health-check annotations, e.g.
// service.beta.kubernetes.io/do-loadbalancer-healthcheck-port: "8086" and
// ...-healthcheck-protocol: "http" (the keys STUNner matches).
var (
	healthPortAnnotation     = regexp.MustCompile(`^service\.beta\.kubernetes\.io/.*health.*port$`)
	healthProtocolAnnotation = regexp.MustCompile(`^service\.beta\.kubernetes\.io/.*health.*protocol$`)
)

// healthCheckPort adds the port a provider's health-check annotations name
// to svc, forwarded to ternd's health port. Some load balancers mark a UDP
// Service unhealthy, and drop its traffic, unless they can probe a TCP port
// through the Service itself; STUNner adds the port for them, so do we.
// Both the port and the protocol annotation must be set; a port that is not
// a number (AWS's "traffic-port") names no port of its own.
func (r *renderer) healthCheckPort(gw *gwapiv1.Gateway, svc *corev1.Service, ann map[string]string) {
	var port int
	var proto string
	for _, k := range sortedKeys(ann) {
		v := strings.TrimSpace(ann[k])
		switch {
		case healthPortAnnotation.MatchString(k):
			p, err := strconv.Atoi(v)
			if err != nil || p < 1 || p > 65535 {
				continue
			}
			port = p
		case healthProtocolAnnotation.MatchString(k):
			switch strings.ToUpper(v) {
			case "TCP", "HTTP":
				proto = "TCP"
			default:
				r.problems.warnf(gatewayRef(gw), annotationField(k), "health-check port not exposed: protocol %q is not TCP or HTTP", v)
				return
			}
		}
	}
	if port == 0 || proto == "" {
		return
	}
	for _, p := range svc.Spec.Ports {
		if p.Port == int32(port) && p.Protocol == corev1.ProtocolTCP {
			r.problems.warnf(gatewayRef(gw), "metadata.annotations", "health-check port %d not exposed: a listener uses it", port)
			return
		}
	}
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
		Name:       HealthCheckPortName,
		Protocol:   corev1.ProtocolTCP,
		Port:       int32(port),
		TargetPort: intstr.FromInt32(HealthPort),
	})
}

// listenerPorts parses the nodeport or targetport annotation key of ann: a
// JSON map of listener name to port. Like STUNner, the braces may be left
// out ("udp-listener": 30478). An unparsable value, an unknown listener or
// a port out of range is a warning and left out.
func (r *renderer) listenerPorts(gw *gwapiv1.Gateway, ann map[string]string, key string) map[string]int {
	v, ok := ann[key]
	if !ok {
		return nil
	}
	m := map[string]int{}
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		if err2 := json.Unmarshal([]byte("{"+v+"}"), &m); err2 != nil {
			r.problems.warnf(gatewayRef(gw), annotationField(key), "ignored: want a JSON map of listener name to port, e.g. {\"udp-listener\": 30478}: %v", err)
			return nil
		}
	}
	names := map[string]bool{}
	for _, l := range gw.Spec.Listeners {
		names[string(l.Name)] = true
	}
	out := map[string]int{}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch p := m[k]; {
		case !names[k]:
			r.problems.warnf(gatewayRef(gw), annotationField(key), "no listener named %q; ignored", k)
		case p < 1 || p > 65535:
			r.problems.warnf(gatewayRef(gw), annotationField(key), "listener %q: port %d out of range; ignored", k, p)
		default:
			out[k] = p
		}
	}
	return out
}

// listenerPortAnnotations applies the targetport and nodeport annotations
// to gw's listeners, before the config is built: ternd listens on the
// target port (so the container needs no privilege for a listener on 443),
// and a fixed node port of a NodePort Service is the listener's public port
// from the start, before the Service exists.
func (r *renderer) listenerPortAnnotations(gw *gwapiv1.Gateway, listeners []*listenerState, ann map[string]string, typ corev1.ServiceType) {
	tps := r.listenerPorts(gw, ann, AnnotationTargetPort)
	nps := r.listenerPorts(gw, ann, AnnotationNodePort)
	if len(nps) > 0 && typ == corev1.ServiceTypeClusterIP {
		// The API server refuses nodePort on a ClusterIP Service.
		r.problems.warnf(gatewayRef(gw), annotationField(AnnotationNodePort), "ignored on a ClusterIP Service")
		nps = nil
	}
	for _, ls := range listeners {
		ls.targetPort = tps[string(ls.l.Name)]
		ls.nodePort = nps[string(ls.l.Name)]
	}
}
